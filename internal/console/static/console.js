// The console's only script: reload a page that asks for it (the rollout
// page while a canary runs) unless someone is filling in one of its forms.
// Served from the console itself, as the Content-Security-Policy requires.
"use strict";
(function () {
  const el = document.querySelector("[data-refresh]");
  if (!el) {
    return;
  }
  const seconds = Number(el.dataset.refresh) || 2;
  setInterval(function () {
    const busy = Array.from(document.querySelectorAll("input[type=text]")).some(function (i) {
      return i.value !== "" || i === document.activeElement;
    });
    if (!busy) {
      location.reload();
    }
  }, seconds * 1000);
})();
