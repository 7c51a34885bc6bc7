// Package browser holds sluice's tests that need a real browser: headless
// Chromium driven over the DevTools protocol (chromedp), checking what a
// page shows after it has been laid out and its scripts have run. It is a
// module of its own so that chromedp stays out of sluice's dependencies;
// scripts/test installs Chromium (Debian's chromium package) and runs it.
//
// A test starts a browser with Start and drives it with chromedp's
// actions:
//
//	ctx := browser.Start(t)
//	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil { ... }
//	title, err := chromedp.Run(ctx, chromedp.Title())
package browser

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Binaries are the names Chromium is looked up by on $PATH, in order.
var Binaries = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Flags are the command-line switches every test browser runs with:
// headless, no sandbox (tests run as root in CI), and nothing that reaches
// the network on its own (updates, sync, QUIC). Start adds a fresh
// --user-data-dir.
var Flags = []chromedp.ExecAllocatorOption{
	chromedp.Flag("headless", true),
	chromedp.Flag("no-sandbox", true),
	chromedp.Flag("disable-gpu", true),
	chromedp.Flag("disable-quic", true),
	chromedp.Flag("no-first-run", true),
	chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-sync", true),
	chromedp.Flag("disable-dev-shm-usage", true),
	chromedp.WindowSize(1400, 1800),
}

// Path returns the Chromium binary on $PATH, failing the test when there
// is none: scripts/test installs it, and a browser test never skips.
func Path(t testing.TB) string {
	t.Helper()
	for _, name := range Binaries {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no Chromium on $PATH (tried %v): install Debian's chromium package (scripts/test does)", Binaries)
	return ""
}

// Start launches a headless Chromium for the test, with a fresh profile in
// a temporary directory, and returns a chromedp context whose actions run
// in its first tab, bounded by a minute in all. The browser is closed when
// the test ends.
func Start(t testing.TB) context.Context {
	t.Helper()
	return StartFor(t, time.Minute)
}

// StartFor is Start with the actions bounded by d in all, for a test that
// waits on servers as well as on the page.
func StartFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{chromedp.ExecPath(Path(t)), chromedp.UserDataDir(t.TempDir())}, Flags...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// Start the browser now, on a context without a deadline (the browser
	// lives as long as the context of the first action), so that one that
	// cannot start fails here with its reason.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(tab, d)
	t.Cleanup(cancel)
	return ctx
}
