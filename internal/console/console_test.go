package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/console"
	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/rules"
)

const (
	readToken    = "read-token-0123456789"
	writeToken   = "write-token-0123456789"
	gatewayToken = "gateway-token-0123456789"
)

// service is a rules service on a fresh schema, served by httptest, with
// its log.
type service struct {
	url string
	log *proctest.Buffer
}

func startService(t *testing.T, tls bool) service {
	t.Helper()
	log := &proctest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := rulesvc.New(ctx, rulesvc.Config{Postgres: pgtest.DSN(), Schema: pgtest.Schema(t, "sluice_console_"),
		Tokens: []rulesvc.Token{
			{Name: "alice", Secret: writeToken, Role: rulesvc.RoleWrite},
			{Name: "bob", Secret: readToken, Role: rulesvc.RoleRead},
			{Name: "gateways", Secret: gatewayToken, Role: rulesvc.RoleGateway},
		},
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Run(ctx)
	}()
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(svc.Handler())
	} else {
		srv = httptest.NewServer(svc.Handler())
	}
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		svc.Close()
	})
	return service{url: srv.URL, log: log}
}

// browser is an HTTP client with cookies that does not follow redirects.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func send(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	return send(t, c, req)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, origin string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return send(t, c, req)
}

// login signs c in with token and returns the session's CSRF token, read
// from a page's form.
func login(t *testing.T, c *http.Client, base, token string) string {
	t.Helper()
	resp, body := post(t, c, base+"/ui/login", url.Values{"token": {token}}, base)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: got %d, want 303:\n%s", resp.StatusCode, body)
	}
	_, page := get(t, c, base+"/ui/overrides")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the overrides page:\n%s", page)
	}
	return m[1]
}

func adminClient(base, token string) *admin.Client { return &admin.Client{BaseURL: base, Token: token} }

func overrideForm(csrf, key string) url.Values {
	return url.Values{"csrf": {csrf}, "key": {key}, "rate": {"5"}, "per": {"1s"}, "reason": {"INC-1: test"}, "for": {"2h"}}
}

func TestEveryAnswerCarriesTheCSP(t *testing.T) {
	svc := startService(t, false)
	c := browser(t)
	login(t, c, svc.url, readToken)
	for _, path := range []string{"/ui/login", "/ui/rules", "/ui/rollout", "/ui/shadow", "/ui/overrides", "/ui/fleet",
		"/ui/static/console.js", "/ui/static/console.css", "/ui/nothing"} {
		resp, body := get(t, c, svc.url+path)
		if got := resp.Header.Get("Content-Security-Policy"); got != console.CSP {
			t.Errorf("%s: Content-Security-Policy %q, want %q", path, got, console.CSP)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", path, got)
		}
		if strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".css") {
			continue
		}
		// No inline script or style: the policy would block it anyway.
		for _, bad := range []string{"<script>", "style=", " onclick=", "<style"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s: page holds %q, which the policy forbids", path, bad)
			}
		}
	}
	if resp, _ := get(t, c, svc.url+"/ui/static/"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/ui/static/: got %d, want 404, not a listing", resp.StatusCode)
	}
	if !strings.Contains(console.CSP, "default-src 'self'") || strings.Contains(console.CSP, "unsafe") {
		t.Errorf("CSP %q: want default-src 'self' and nothing unsafe", console.CSP)
	}
}

func TestLoginKeepsTheTokenOnTheServer(t *testing.T) {
	for _, tls := range []bool{false, true} {
		svc := startService(t, tls)
		c := browser(t)
		if tls {
			c.Transport = &http.Transport{TLSClientConfig: insecureTLS()}
		}
		resp, _ := post(t, c, svc.url+"/ui/login", url.Values{"token": {writeToken}}, "")
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("tls %v: login got %d, want 303", tls, resp.StatusCode)
		}
		if loc := resp.Header.Get("Location"); strings.Contains(loc, writeToken) {
			t.Errorf("tls %v: redirect to %q holds the token", tls, loc)
		}
		cookies := resp.Cookies()
		if len(cookies) != 1 {
			t.Fatalf("tls %v: %d cookies set, want 1", tls, len(cookies))
		}
		ck := cookies[0]
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tls || strings.Contains(ck.Value, writeToken) {
			t.Errorf("tls %v: cookie %s: HttpOnly %v, SameSite %v, Secure %v; want HttpOnly, Strict, Secure %v, no token",
				tls, ck.Name, ck.HttpOnly, ck.SameSite, ck.Secure, tls)
		}
		if resp, _ := get(t, c, svc.url+"/ui/rules"); (resp.Header.Get("Strict-Transport-Security") != "") != tls {
			t.Errorf("tls %v: Strict-Transport-Security %q", tls, resp.Header.Get("Strict-Transport-Security"))
		}
		for _, path := range []string{"/ui/rules", "/ui/overrides"} {
			if _, body := get(t, c, svc.url+path); strings.Contains(body, writeToken) {
				t.Errorf("tls %v: %s shows the token", tls, path)
			}
		}
		if strings.Contains(svc.log.String(), writeToken) {
			t.Errorf("tls %v: the log holds the token:\n%s", tls, svc.log)
		}
	}
}

func TestLoginRefusesUnknownAndGatewayTokens(t *testing.T) {
	svc := startService(t, false)
	for _, tok := range []string{"", "not-a-token-0123456789", gatewayToken} {
		c := browser(t)
		resp, body := post(t, c, svc.url+"/ui/login", url.Values{"token": {tok}}, "")
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("token %q: got %d with %d cookies, want 401 and none:\n%s", tok, resp.StatusCode, len(resp.Cookies()), body)
		}
	}
	c := browser(t)
	if resp, _ := get(t, c, svc.url+"/ui/rules"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" {
		t.Errorf("a page without a session: got %d to %q, want 303 to /ui/login", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestWritesNeedTheSessionsCSRFToken(t *testing.T) {
	svc := startService(t, false)
	c := browser(t)
	csrf := login(t, c, svc.url, writeToken)
	other := browser(t)
	otherCSRF := login(t, other, svc.url, writeToken)
	for _, tc := range []struct {
		name   string
		csrf   string
		origin string
		want   int
	}{
		{"no token", "", "", http.StatusForbidden},
		{"a wrong token", "x" + csrf[1:], "", http.StatusForbidden},
		{"another session's token", otherCSRF, "", http.StatusForbidden},
		{"the right token from another site", csrf, "https://evil.example", http.StatusForbidden},
		{"the right token", csrf, svc.url, http.StatusSeeOther},
	} {
		key := "k-" + strings.ReplaceAll(tc.name, " ", "-")
		resp, body := post(t, c, svc.url+"/ui/overrides", overrideForm(tc.csrf, key), tc.origin)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: got %d, want %d:\n%s", tc.name, resp.StatusCode, tc.want, body)
		}
		os, err := adminClient(svc.url, readToken).Overrides(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		stored := len(os) > 0 && os[len(os)-1].Match.Key == key
		if stored != (tc.want == http.StatusSeeOther) {
			t.Errorf("%s: override stored %v, want %v", tc.name, stored, tc.want == http.StatusSeeOther)
		}
	}
}

func TestReadTokenWritesAreRefusedByTheServer(t *testing.T) {
	svc := startService(t, false)
	w := adminClient(svc.url, writeToken)
	if _, err := w.SetOverride(context.Background(), "k-existing", admin.Override{Reason: "r",
		Limits: []rules.Limit{{Name: "s", Rate: 1, Per: rules.Duration(time.Second)}}, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	csrf := login(t, c, svc.url, readToken)
	_, page := get(t, c, svc.url+"/ui/overrides")
	if strings.Contains(page, `id="override-form"`) || strings.Contains(page, "End now") {
		t.Errorf("a read session sees write controls")
	}
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/ui/overrides", overrideForm(csrf, "k-new")},
		{"/ui/overrides/end", url.Values{"csrf": {csrf}, "key": {"k-existing"}}},
		{"/ui/rollout/promote", url.Values{"csrf": {csrf}, "reason": {"x"}}},
		{"/ui/rollout/halt", url.Values{"csrf": {csrf}, "reason": {"x"}}},
	} {
		resp, body := post(t, c, svc.url+tc.path, tc.form, svc.url)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "role read") {
			t.Errorf("%s with a read token: got %d, want 403 from the admin API:\n%s", tc.path, resp.StatusCode, body)
		}
	}
	os, err := w.Overrides(context.Background())
	if err != nil || len(os) != 1 || os[0].Match.Key != "k-existing" {
		t.Errorf("overrides after refused writes: %v, %v; want k-existing alone", os, err)
	}
}

func TestUserInputIsShownAsText(t *testing.T) {
	svc := startService(t, false)
	const reason = `<script>alert(1)</script><img src=x onerror=alert(2)>"'&`
	const key = `k<b>"x"</b>`
	w := adminClient(svc.url, writeToken)
	if _, err := w.CreateRule(context.Background(), rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "<i>pro</i>"},
		Limits: []rules.Limit{{Name: "s", Rate: 10, Per: rules.Duration(time.Second)}}, Reason: reason}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.SetOverride(context.Background(), key, admin.Override{Reason: reason,
		Limits: []rules.Limit{{Name: "s", Rate: 1, Per: rules.Duration(time.Second)}}, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	login(t, c, svc.url, readToken)
	for _, path := range []string{"/ui/rules", "/ui/overrides", "/ui/rollout"} {
		_, body := get(t, c, svc.url+path)
		for _, raw := range []string{"<script>alert", "<img src=x", "<b>\"x\"", "<i>pro"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s: holds %q unescaped", path, raw)
			}
		}
		if path != "/ui/rollout" && !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: the reason is not shown escaped", path)
		}
	}
}

func TestDiffBetweenVersions(t *testing.T) {
	svc := startService(t, false)
	w := adminClient(svc.url, writeToken)
	ctx := context.Background()
	lim := []rules.Limit{{Name: "s", Rate: 10, Per: rules.Duration(time.Second)}}
	a, err := w.CreateRule(ctx, rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "free"}, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.CreateRule(ctx, rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Limits: lim, Reason: "second"})
	if err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	login(t, c, svc.url, readToken)
	u := svc.url + "/ui/rules?from=" + itoa(a.Snapshot.Version) + "&to=" + itoa(b.Snapshot.Version)
	resp, body := get(t, c, u)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("diff: got %d:\n%s", resp.StatusCode, body)
	}
	m := regexp.MustCompile(`(?s)<table id="diff">.*?</table>`).FindString(body)
	if strings.Count(m, `class="op-`) != 1 || !strings.Contains(m, "op-add") || !strings.Contains(m, "&#34;second&#34;") {
		t.Errorf("diff of versions %d and %d: want one added rule with reason second, got:\n%s", a.Snapshot.Version, b.Snapshot.Version, m)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestExplainIsAPostWithTheCSRFToken(t *testing.T) {
	svc := startService(t, false)
	w := adminClient(svc.url, writeToken)
	ctx := context.Background()
	if _, err := w.ApplyRuleSet(ctx, rules.Document{Keys: map[string]rules.KeyInfo{"key<i>pro</i>": {Plan: "pro"}},
		Rules: []rules.Rule{{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Reason: "<b>pro</b> tier",
			Limits: []rules.Limit{{Name: "s", Rate: 10, Per: rules.Duration(time.Second)}}}}}, false); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	csrf := login(t, c, svc.url, readToken)
	ask := url.Values{"key": {"key<i>pro</i>"}, "method": {"GET"}, "path": {"/v1/items"}}
	if resp, _ := post(t, c, svc.url+"/ui/explain", ask, svc.url); resp.StatusCode != http.StatusForbidden {
		t.Errorf("explain without the CSRF token: got %d, want 403", resp.StatusCode)
	}
	ask.Set("csrf", csrf)
	resp, body := post(t, c, svc.url+"/ui/explain", ask, svc.url)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="e-plan">pro<`) {
		t.Fatalf("explain with a read session: got %d, want 200 with plan pro:\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, "<i>pro") || strings.Contains(body, "<b>pro") || !strings.Contains(body, "&lt;b&gt;pro&lt;/b&gt; tier") {
		t.Errorf("explain shows the key or the reason unescaped")
	}
	ask.Set("region", "eu")
	if resp, body := post(t, c, svc.url+"/ui/explain", ask, svc.url); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "balancer") {
		t.Errorf("explain of a region without a balancer: got %d, want the API's 400 naming the balancer:\n%s", resp.StatusCode, body)
	}
	ask.Del("region")
	ask.Set("path", "no-slash")
	if resp, body := post(t, c, svc.url+"/ui/explain", ask, svc.url); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "path") {
		t.Errorf("explain of a bad path: got %d, want the API's 400 naming path:\n%s", resp.StatusCode, body)
	}
}

func TestWriteSessionHaltsACanaryAndEndsAnOverride(t *testing.T) {
	svc := startService(t, false)
	w := adminClient(svc.url, writeToken)
	ctx := context.Background()
	lim := func(rate rules.Rate) []rules.Limit {
		return []rules.Limit{{Name: "s", Rate: rate, Per: rules.Duration(time.Second)}}
	}
	// The first rules are promoted at once; the next change is a canary,
	// waiting for gateways.
	if _, err := w.CreateRule(ctx, rules.Rule{Scope: rules.ScopeDefault, Limits: lim(10)}); err != nil {
		t.Fatal(err)
	}
	ch, err := w.CreateRule(ctx, rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Limits: lim(20)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.SetOverride(ctx, "k1", admin.Override{Reason: "r", Limits: lim(1), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	csrf := login(t, c, svc.url, writeToken)
	_, page := get(t, c, svc.url+"/ui/rollout")
	if !strings.Contains(page, `id="halt"`) || !strings.Contains(page, `id="promote"`) {
		t.Fatalf("the rollout page shows a write session no halt and promote buttons:\n%s", page)
	}
	for _, tc := range []struct{ path, field, value, flash string }{
		{"/ui/rollout/halt", "reason", "refusals up", "halted"},
		{"/ui/overrides/end", "key", "k1", "override of k1 ended"},
	} {
		resp, body := post(t, c, svc.url+tc.path, url.Values{"csrf": {csrf}, tc.field: {tc.value}}, svc.url)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: got %d, want 303:\n%s", tc.path, resp.StatusCode, body)
		}
		if _, page := get(t, c, svc.url+resp.Header.Get("Location")); !strings.Contains(page, tc.flash) {
			t.Errorf("%s: the next page does not say %q", tc.path, tc.flash)
		}
	}
	st, err := w.Rollout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The override laid itself over the stable version and started a
	// canary of the whole rule set, superseding ch's: that one was halted.
	halted := 0
	for _, ro := range st.Rollouts {
		if ro.Version > ch.Snapshot.Version && ro.State == "halted" && strings.Contains(ro.Reason, "alice") && strings.Contains(ro.Reason, "refusals up") {
			halted++
		}
	}
	if halted != 1 {
		t.Errorf("rollouts after the console's halt: %+v; want one above version %d halted by alice with the reason", st.Rollouts, ch.Snapshot.Version)
	}
	if os, err := w.Overrides(ctx); err != nil || len(os) != 0 {
		t.Errorf("overrides after the console ended k1: %v, %v; want none", os, err)
	}
}
