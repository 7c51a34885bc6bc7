package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/process"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// testRules is the rule set most tests run against.
const testRules = `
keys:
  key_pro: {plan: pro}
  key_free: {plan: free}
  key_vip: {plan: pro}
endpoints:
  - {name: search, method: GET, path: /v1/search, cost: 5}
  - {name: login, method: POST, path: /v1/login}
  - {name: export, path: /v1/export/*, cost: 50}
rules:
  - scope: default
    limits: [{name: s, rate: 5, per: 1s, burst: 10}]
  - scope: plan
    match: {plan: pro}
    limits:
      - {name: s, rate: 100, per: 1s, burst: 200}
      - {name: m, rate: 1000, per: 1m}
  - scope: plan
    match: {plan: pro, endpoint: search}
    limits: [{name: s, rate: 20, per: 1s}]
  - scope: key
    match: {key: key_vip}
    limits: [{name: s, rate: 10, per: 1s, burst: 30}]
  - scope: ip
    limits: [{name: ip, rate: 2, per: 1s, burst: 4}]
  - scope: endpoint
    match: {endpoint: login}
    limits: [{name: login, rate: 3, per: 1m}]
    fail_mode: closed
  - scope: default
    mode: shadow
    limits: [{name: shadow_s, rate: 1, per: 1s, burst: 2}]
`

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testGateway is a Limiter in front of a handler answering 200, served by
// a real HTTP server, with a stopped clock, a metrics registry and a log.
type testGateway struct {
	srv   *httptest.Server
	clock *limittest.Clock
	reg   *prometheus.Registry
	log   *proctest.Buffer

	mu     sync.Mutex
	events []gateway.Event // guarded by mu
}

func newTestGateway(t *testing.T, ruleYAML string, edit func(*gateway.Config)) *testGateway {
	t.Helper()
	set, err := rules.Parse("test.yaml", []byte(ruleYAML))
	if err != nil {
		t.Fatal(err)
	}
	g := &testGateway{clock: limittest.NewClock(start), reg: prometheus.NewRegistry(), log: &proctest.Buffer{}}
	cfg := gateway.Config{
		Rules:      gateway.StaticRules(set),
		Now:        g.clock.Now,
		Registerer: g.reg,
		Logger:     slog.New(slog.NewJSONHandler(g.log, nil)),
		OnDecision: func(e gateway.Event) {
			g.mu.Lock()
			g.events = append(g.events, e)
			g.mu.Unlock()
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	lim, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	g.srv = httptest.NewUnstartedServer(nil)
	g.srv.Config = process.NewServer(lim.Middleware(ok), nil)
	g.srv.Start()
	t.Cleanup(g.srv.Close)
	return g
}

// do sends a request with headers given as name, value pairs and returns
// the response with its body read.
func (g *testGateway) do(t *testing.T, method, path string, header ...string) (*http.Response, string) {
	t.Helper()
	return doURL(t, method, g.srv.URL+path, header...)
}

func doURL(t *testing.T, method, url string, header ...string) (*http.Response, string) {
	t.Helper()
	return proctest.Do(t, method, url, header...)
}

// keys returns the store keys of the enforced checks so far, in order.
func (g *testGateway) keys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, e := range g.events {
		if !e.Shadow {
			out = append(out, e.Key)
		}
	}
	return out
}

// rateHeaders returns the five budget headers of a response, in a fixed order.
func rateHeaders(h http.Header) [5]string {
	return [5]string{h.Get("RateLimit-Policy"), h.Get("RateLimit"),
		h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset")}
}

func decodeProblem(t *testing.T, resp *http.Response, body string) gateway.Problem {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p gateway.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if p.Status != resp.StatusCode {
		t.Errorf("problem status %d, response status %d: want the same", p.Status, resp.StatusCode)
	}
	return p
}

func TestHeadersOfASequence(t *testing.T) {
	g := newTestGateway(t, testRules, nil)
	// The default rule: 5 a second, bursts of 10. The clock is stopped, so
	// each request takes one token and the bucket needs 200 ms per token
	// to fill again.
	policy := `"s";q=10;w=2`
	for i := 1; i <= 10; i++ {
		resp, _ := g.do(t, "GET", "/", "X-API-Key", "key_free")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, resp.StatusCode)
		}
		reset := (200*i + 999) / 1000
		want := [5]string{policy, fmt.Sprintf(`"s";r=%d;t=%d`, 10-i, reset), "10", fmt.Sprint(10 - i), fmt.Sprint(reset)}
		if got := rateHeaders(resp.Header); got != want {
			t.Errorf("request %d: headers %q, want %q", i, got, want)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("request %d: allowed with Retry-After %q, want none", i, ra)
		}
	}
	resp, body := g.do(t, "GET", "/", "X-API-Key", "key_free")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 11: status %d, want 429", resp.StatusCode)
	}
	if got, want := rateHeaders(resp.Header), [5]string{policy, `"s";r=0;t=2`, "10", "0", "2"}; got != want {
		t.Errorf("request 11: headers %q, want %q", got, want)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("request 11: Retry-After %q, want 1 (200 ms rounded up)", got)
	}
	p := decodeProblem(t, resp, body)
	// The refusing rule is named: the default rule of a rules file.
	if p.Rule == nil || *p.Rule != (gateway.ProblemRule{Scope: rules.ScopeDefault}) ||
		len(p.Limits) != 1 || p.Limits[0].Remaining == nil || *p.Limits[0].Remaining != 0 ||
		p.Limits[0] != (gateway.ProblemLimit{Name: "s", Quota: 10, Window: 2, Refused: true, Remaining: p.Limits[0].Remaining,
			RetryAfterMillis: 200, Rule: *p.Rule}) {
		t.Errorf("problem rule %+v limits %+v, want the default rule's s, 10 per 2 s, refusing", p.Rule, p.Limits)
	}
	p.Rule, p.Limits = nil, nil
	want := gateway.Problem{Type: gateway.QuotaExceeded, Title: p.Title, Status: 429, Detail: p.Detail,
		Limit: "s", ViolatedPolicies: []string{"s"}, RetryAfterMillis: 200}
	if fmt.Sprint(p) != fmt.Sprint(want) {
		t.Errorf("problem %+v, want %+v", p, want)
	}
	if !strings.Contains(p.Detail, `"s"`) || !strings.Contains(p.Detail, "200 ms") {
		t.Errorf("problem detail %q: want the limit name and the wait", p.Detail)
	}

	g.clock.Advance(200 * time.Millisecond)
	if resp, _ := g.do(t, "GET", "/", "X-API-Key", "key_free"); resp.StatusCode != http.StatusOK {
		t.Errorf("200 ms after the refusal: status %d, want 200 (one token refilled)", resp.StatusCode)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name      string
		limit     string // one default rule's limit
		cost      int64  // of endpoint /cost
		before    int    // requests spent before the refused one
		wantRetry string
		wantMS    int64
	}{
		{"one token at 10/s", "{name: s, rate: 10, per: 1s}", 1, 10, "1", 100},
		{"one token at 1/s", "{name: s, rate: 1, per: 1s}", 1, 1, "1", 1000},
		{"1.5 s rounds up", "{name: s, rate: 2, per: 3s, burst: 1}", 1, 1, "2", 1500},
		{"cost 3 at 1/s", "{name: s, rate: 1, per: 1s, burst: 4}", 3, 1, "2", 2000},
		{"per minute", "{name: m, rate: 1, per: 1m}", 1, 1, "60", 60000},
		{"cost above burst waits a period", "{name: s, rate: 5, per: 1s, burst: 4}", 5, 0, "1", 1000},
		{"cost above a per-minute burst", "{name: m, rate: 3, per: 1m}", 5, 0, "60", 60000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := fmt.Sprintf("endpoints: [{name: c, path: /cost, cost: %d}]\nrules:\n  - scope: default\n    limits: [%s]\n", tt.cost, tt.limit)
			g := newTestGateway(t, y, nil)
			for i := range tt.before {
				if resp, _ := g.do(t, "GET", "/cost", "X-API-Key", "k"); resp.StatusCode != 200 {
					t.Fatalf("request %d of %d before the refusal: status %d", i+1, tt.before, resp.StatusCode)
				}
			}
			resp, body := g.do(t, "GET", "/cost", "X-API-Key", "k")
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", resp.StatusCode)
			}
			if got := resp.Header.Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After %q, want %q", got, tt.wantRetry)
			}
			if p := decodeProblem(t, resp, body); p.RetryAfterMillis != tt.wantMS {
				t.Errorf("retry_after_ms %d, want %d", p.RetryAfterMillis, tt.wantMS)
			}
		})
	}
}

func TestPrecedenceAndCost(t *testing.T) {
	tests := []struct {
		name, method, path, key string
		wantPolicy, wantRL      string
	}{
		{"unknown key gets the default", "GET", "/", "nobody", `"s";q=10;w=2`, `"s";r=9;t=1`},
		{"plan without rules gets the default", "GET", "/", "key_free", `"s";q=10;w=2`, `"s";r=9;t=1`},
		{"plan beats the default", "GET", "/", "key_pro", `"s";q=200;w=2`, `"s";r=199;t=1`},
		{"plan and endpoint beat the plan, cost 5", "GET", "/v1/search", "key_pro", `"s";q=20;w=1`, `"s";r=15;t=1`},
		{"endpoint cost under the default", "GET", "/v1/search", "key_free", `"s";q=10;w=2`, `"s";r=5;t=1`},
		{"method must match the endpoint", "POST", "/v1/search", "key_free", `"s";q=10;w=2`, `"s";r=9;t=1`},
		{"key override beats plan and endpoint", "GET", "/v1/search", "key_vip", `"s";q=30;w=3`, `"s";r=25;t=1`},
		{"key override beats the plan", "GET", "/", "key_vip", `"s";q=30;w=3`, `"s";r=29;t=1`},
		{"endpoint rule adds its own limit", "POST", "/v1/login", "key_free", `"login";q=3;w=60`, `"login";r=2;t=20`},
		{"no key: the ip rule stands in", "GET", "/", "", `"ip";q=4;w=2`, `"ip";r=3;t=1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, testRules, nil)
			var hdr []string
			if tt.key != "" {
				hdr = []string{"X-API-Key", tt.key}
			}
			resp, _ := g.do(t, tt.method, tt.path, hdr...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != tt.wantPolicy {
				t.Errorf("RateLimit-Policy %q, want %q", got, tt.wantPolicy)
			}
			if got := resp.Header.Get("RateLimit"); got != tt.wantRL {
				t.Errorf("RateLimit %q, want %q", got, tt.wantRL)
			}
		})
	}
}

func TestCostAboveBurstNeverPasses(t *testing.T) {
	g := newTestGateway(t, testRules, nil)
	// /v1/export/* costs 50, more than the default burst of 10.
	resp, body := g.do(t, "GET", "/v1/export/all", "X-API-Key", "key_free")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	p := decodeProblem(t, resp, body)
	if !strings.Contains(p.Detail, "cannot pass") || !strings.Contains(p.Detail, "50") {
		t.Errorf("detail %q: want it to say the cost of 50 can never pass", p.Detail)
	}
	// The refusal took nothing.
	resp, _ = g.do(t, "GET", "/", "X-API-Key", "key_free")
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "9" {
		t.Errorf("after a refused export, remaining %q, want 9", got)
	}
}

func TestIdentity(t *testing.T) {
	long := strings.Repeat("k", rules.MaxKeyLen)
	tests := []struct {
		name   string
		header []string
		want   string
	}{
		{"X-API-Key", []string{"X-API-Key", "key_pro"}, "k:key_pro"},
		{"Bearer", []string{"Authorization", "Bearer key_pro"}, "k:key_pro"},
		{"bearer in lower case", []string{"Authorization", "bearer key_pro"}, "k:key_pro"},
		{"the same key in both headers", []string{"X-API-Key", "a", "Authorization", "Bearer a"}, "k:a"},
		{"X-API-Key beside Basic", []string{"X-API-Key", "a", "Authorization", "Basic dXNlcjpwdw=="}, "k:a"},
		{"Basic is not a key", []string{"Authorization", "Basic dXNlcjpwdw=="}, "ip:127.0.0.1"},
		{"no key", nil, "ip:127.0.0.1"},
		{"empty key", []string{"X-API-Key", ""}, "ip:127.0.0.1"},
		{"a key that looks like an address", []string{"X-API-Key", "ip:127.0.0.1"}, "k:ip:127.0.0.1"},
		{"the longest key", []string{"X-API-Key", long}, "k:" + long},
		{"spoofed X-Forwarded-For from an untrusted peer", []string{"X-Forwarded-For", "203.0.113.7"}, "ip:127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, testRules, nil)
			if resp, _ := g.do(t, "GET", "/", tt.header...); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if got := g.keys(); len(got) != 1 || got[0] != tt.want {
				t.Errorf("limited as %q, want [%q]", got, tt.want)
			}
		})
	}
}

// TestTwoKeysAre400: a request naming two API keys is refused, not limited
// as one of them. sluice does not authenticate keys, so if X-API-Key won
// over the Bearer token the upstream checks, a client could send a fresh
// invented X-API-Key each time and get a fresh bucket each time.
func TestTwoKeysAre400(t *testing.T) {
	const perMinute = `rules:
- {scope: ip, limits: [{name: s, rate: 1, per: 1m}]}
- {scope: default, limits: [{name: s, rate: 1, per: 1m}]}
`
	tests := []struct {
		name   string
		header []string
		detail string
	}{
		{"X-API-Key and a different Bearer", []string{"X-API-Key", "junk-1", "Authorization", "Bearer real"}, "X-API-Key and the Bearer token in Authorization hold different keys"},
		{"two X-API-Key lines", []string{"X-API-Key", "a", "X-API-Key", "b"}, "X-API-Key appears 2 times"},
		{"two X-API-Key lines, the same key", []string{"X-API-Key", "a", "X-API-Key", "a"}, "X-API-Key appears 2 times"},
		{"two Authorization lines", []string{"Authorization", "Bearer a", "Authorization", "Bearer b"}, "Authorization appears 2 times"},
		{"X-API-Key joined by a comma", []string{"X-API-Key", "a1,a2"}, "X-API-Key holds 2 comma-separated values"},
		{"X-API-Key joined by a comma and a space", []string{"X-API-Key", "a1, a2"}, "X-API-Key holds 2 comma-separated values"},
		{"X-API-Key, the same key twice on one line", []string{"X-API-Key", "a,a"}, "X-API-Key holds 2 comma-separated values"},
		{"X-API-Key with a trailing comma", []string{"X-API-Key", "a1,"}, "X-API-Key holds 2 comma-separated values"},
		{"two Bearer tokens joined on one line", []string{"Authorization", "Bearer a, Bearer b"}, "Authorization holds 2 comma-separated values"},
		{"a Bearer token with commas", []string{"Authorization", "Bearer a,b,c"}, "Authorization holds 3 comma-separated values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, perMinute, nil)
			resp, body := g.do(t, "GET", "/", tt.header...)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			if p := decodeProblem(t, resp, body); !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("problem detail %q, want it to say %q", p.Detail, tt.detail)
			}
			if got := g.keys(); len(got) != 0 {
				t.Errorf("limited as %q, want no store call", got)
			}
		})
	}
	// The attack the 400 stops: a junk X-API-Key per request beside the
	// real Bearer token. At most the one request the limit allows passes.
	g := newTestGateway(t, perMinute, nil)
	passed := 0
	for i := range 20 {
		if resp, _ := g.do(t, "GET", "/", "X-API-Key", fmt.Sprint("junk-", i), "Authorization", "Bearer real"); resp.StatusCode == http.StatusOK {
			passed++
		}
	}
	if passed != 0 {
		t.Errorf("a fresh X-API-Key per request beside one Bearer token: %d of 20 passed, want 0", passed)
	}
}

// TestUnknownKeysAsAddress: with the option, a key the directory does not
// hold is limited as its client address, so inventing keys buys nothing.
func TestUnknownKeysAsAddress(t *testing.T) {
	tests := []struct {
		name   string
		option bool
		key    string
		want   string
	}{
		{"a known key is itself", true, "key_pro", "k:key_pro"},
		{"an unknown key is the address", true, "invented", "ip:127.0.0.1"},
		{"without the option an unknown key is itself", false, "invented", "k:invented"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, testRules, func(c *gateway.Config) { c.UnknownKeysAsAddress = tt.option })
			if resp, _ := g.do(t, "GET", "/", "X-API-Key", tt.key); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if got := g.keys(); len(got) != 1 || got[0] != tt.want {
				t.Errorf("limited as %q, want [%q]", got, tt.want)
			}
		})
	}
	// Invented keys share the address's bucket: its burst, then 429.
	const perMinute = `rules:
- {scope: ip, limits: [{name: s, rate: 1, per: 1m, burst: 3}]}
- {scope: default, limits: [{name: s, rate: 100, per: 1m}]}
`
	g := newTestGateway(t, perMinute, func(c *gateway.Config) { c.UnknownKeysAsAddress = true })
	passed := 0
	for i := range 20 {
		if resp, _ := g.do(t, "GET", "/", "X-API-Key", fmt.Sprint("invented-", i)); resp.StatusCode == http.StatusOK {
			passed++
		}
	}
	if passed != 3 {
		t.Errorf("20 invented keys from one address, its burst 3: %d passed, want 3", passed)
	}
}

func TestForwardedFor(t *testing.T) {
	trusted := func(c *gateway.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	}
	tests := []struct {
		name string
		xff  []string // X-Forwarded-For header lines
		want string
	}{
		{"no header: the proxy itself", nil, "ip:127.0.0.1"},
		{"one client", []string{"203.0.113.7"}, "ip:203.0.113.7"},
		{"rightmost untrusted wins over a spoofed left", []string{"198.51.100.1, 203.0.113.7"}, "ip:203.0.113.7"},
		{"trusted hops are skipped", []string{"203.0.113.7, 10.1.2.3, 10.9.9.9"}, "ip:203.0.113.7"},
		{"several header lines", []string{"198.51.100.1, 203.0.113.7", "10.1.2.3"}, "ip:203.0.113.7"},
		{"IPv6 grouped by /64", []string{"2001:db8:1:2::99"}, "ip:2001:db8:1:2::/64"},
		{"IPv6 with a port", []string{"[2001:db8:1:2:aaaa::1]:4711"}, "ip:2001:db8:1:2::/64"},
		{"IPv4-mapped IPv6 is IPv4", []string{"::ffff:203.0.113.7"}, "ip:203.0.113.7"},
		{"garbage stops at the last trusted hop", []string{"203.0.113.7, not-an-ip, 10.1.2.3"}, "ip:10.1.2.3"},
		{"all trusted: the leftmost", []string{"10.1.1.1, 10.2.2.2"}, "ip:10.1.1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, testRules, trusted)
			var hdr []string
			for _, v := range tt.xff {
				hdr = append(hdr, "X-Forwarded-For", v)
			}
			if resp, _ := g.do(t, "GET", "/", hdr...); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if got := g.keys(); len(got) != 1 || got[0] != tt.want {
				t.Errorf("limited as %q, want [%q]", got, tt.want)
			}
		})
	}
}

func TestIPv6SubscribersShareABucket(t *testing.T) {
	g := newTestGateway(t, testRules, func(c *gateway.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	// The ip rule allows bursts of 4: two addresses of one /64 share them,
	// an address in the next /64 has its own.
	for i, tt := range []struct {
		addr string
		want int
	}{
		{"2001:db8:0:1::1", 200}, {"2001:db8:0:1::2", 200}, {"2001:db8:0:1:ffff::3", 200},
		{"2001:db8:0:1::4", 200}, {"2001:db8:0:1::5", 429}, {"2001:db8:0:2::1", 200},
	} {
		if resp, _ := g.do(t, "GET", "/", "X-Forwarded-For", tt.addr); resp.StatusCode != tt.want {
			t.Errorf("request %d from %s: status %d, want %d", i+1, tt.addr, resp.StatusCode, tt.want)
		}
	}
}

func TestSpoofedForwardedForChangesNothing(t *testing.T) {
	g := newTestGateway(t, testRules, nil)
	// No trusted proxies: a client inventing a new X-Forwarded-For on
	// every request still spends its one address's burst of 4.
	for i := 1; i <= 5; i++ {
		want := http.StatusOK
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		resp, _ := g.do(t, "GET", "/", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
}

func TestHostileKeys(t *testing.T) {
	g := newTestGateway(t, testRules, nil)
	tests := []struct {
		name       string
		header     string // a raw header line
		wantStatus int
		wantDetail string // in the problem detail, when the gateway answers
	}{
		{"key of 257 bytes", "X-API-Key: " + strings.Repeat("k", rules.MaxKeyLen+1), 400, "257 bytes, longer than 256"},
		{"Bearer key of 10000 bytes", "Authorization: Bearer " + strings.Repeat("k", 10000), 400, "10000 bytes"},
		{"tab in the key", "X-API-Key: ab\tcd", 400, "control character 0x09"},
		{"NUL in the key", "X-API-Key: ab\x00cd", 400, ""},
		{"escape in the key", "X-API-Key: ab\x1bcd", 400, ""},
		{"header of 200 KB", "X-API-Key: " + strings.Repeat("k", 200<<10), 431, ""},
		{"many headers", strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 100) + "X-API-Key: k", 431, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, g.srv.Listener.Addr().String(), "GET / HTTP/1.1\r\nHost: x\r\n"+tt.header+"\r\nConnection: close\r\n\r\n")
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (body %.200q)", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantDetail != "" {
				if p := decodeProblem(t, resp, body); !strings.Contains(p.Detail, tt.wantDetail) {
					t.Errorf("detail %q, want it to hold %q", p.Detail, tt.wantDetail)
				}
			}
		})
	}
	if got := g.keys(); len(got) != 0 {
		t.Errorf("hostile requests reached the store as %.40q, want none", got)
	}
	// The server is still there.
	if resp, _ := g.do(t, "GET", "/", "X-API-Key", "k"); resp.StatusCode != http.StatusOK {
		t.Errorf("after the hostile requests: status %d, want 200", resp.StatusCode)
	}
}

// rawRequest writes req as is to addr and reads one response. The writer
// runs beside the reader, so a server that answers before reading a huge
// request does not deadlock the test.
func rawRequest(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.WriteString(conn, req) // the server may close early: ignore the error
	}()
	defer func() { conn.Close(); <-done }()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestControlCharacterInKeyIs400(t *testing.T) {
	// net/http refuses most control characters itself; the Limiter must
	// refuse them too when a server in front of it lets them through.
	set, err := rules.Parse("t.yaml", []byte("rules: [{scope: default, limits: [{name: s, rate: 1, per: 1s}]}]"))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set)})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler reached") }))
	for _, k := range []string{"a\x00b", "a\nb", "\x7f", "a\x1fb"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", k)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Errorf("key %q: status %d, want 400", k, w.Code)
		}
	}
}

// countingStore counts the calls to the store it wraps.
type countingStore struct {
	inner limit.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	s.calls.Add(1)
	return s.inner.Take(ctx, req)
}

func TestShadowNeverRefuses(t *testing.T) {
	store := &countingStore{}
	g := newTestGateway(t, testRules, func(c *gateway.Config) {
		store.inner = memstore.New(memstore.Config{Now: c.Now})
		c.Store = store
	})
	// The shadow default rule allows bursts of 2; the enforced one 10.
	for i := 1; i <= 10; i++ {
		if resp, _ := g.do(t, "GET", "/", "X-API-Key", "key_free"); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 (shadow rules never refuse)", i, resp.StatusCode)
		}
	}
	for _, tt := range []struct {
		outcome, limit string
		want           float64
	}{{"shadow_allowed", "shadow_s", 2}, {"shadow_refused", "shadow_s", 8}, {"allowed", "s", 10}, {"refused", "", 0}} {
		if got := testutil.ToFloat64(mustCounter(t, g.reg, tt.outcome, tt.limit)); got != tt.want {
			t.Errorf("decisions{outcome=%q,limit=%q} = %v, want %v", tt.outcome, tt.limit, got, tt.want)
		}
	}
	logs := g.log.String()
	// Eight would-be refusals in one instant: the metric counts all of them,
	// the log says it once, and names the caller by hash, never by key.
	if n := strings.Count(logs, "shadow rule would refuse"); n != 1 {
		t.Errorf("%d shadow refusal lines logged, want 1 (sampled per key per second):\n%s", n, logs)
	}
	if strings.Contains(logs, "key_free") {
		t.Errorf("shadow log holds the raw API key:\n%.500s", logs)
	}
	for _, want := range []string{`"key":"` + hashOf("k:key_free") + `"`, `"limit":"shadow_s"`, `"scope":"default"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("shadow log lacks %s:\n%.500s", want, logs)
		}
	}
	// Shadow limits have buckets of their own: the enforced bucket lost 10
	// tokens, not 20.
	resp, _ := g.do(t, "GET", "/", "X-API-Key", "key_free")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("request 11: status %d, want 429 from the enforced burst of 10", resp.StatusCode)
	}
	if strings.Contains(resp.Header.Get("RateLimit"), "shadow") {
		t.Errorf("RateLimit %q shows a shadow limit, want only enforced ones", resp.Header.Get("RateLimit"))
	}
	// One store call per request, the shadow limits checked in it.
	if got := store.calls.Load(); got != 11 {
		t.Errorf("%d store calls for 11 requests, want 11", got)
	}
}

// mustCounter returns the decisions counter for outcome and limit.
func mustCounter(t *testing.T, reg *prometheus.Registry, outcome, lim string) prometheus.Collector {
	t.Helper()
	return counterFrom(t, reg, "sluice_gateway_decisions_total", map[string]string{"outcome": outcome, "limit": lim})
}

// counterFrom gathers reg and returns a collector holding the one value
// of name with labels (zero when there is none).
func counterFrom(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "found"})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && lp.GetValue() != want {
					continue metric
				}
			}
			c.Add(m.GetCounter().GetValue())
		}
	}
	return c
}

// failingStore answers every Take with an error, for fault injection.
type failingStore struct{}

func (failingStore) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{}, errors.New("connection refused")
}

func TestStoreErrors(t *testing.T) {
	g := newTestGateway(t, testRules, func(c *gateway.Config) { c.Store = failingStore{} })
	tests := []struct {
		name, method, path string
		wantStatus         int
	}{
		{"fail open", "GET", "/", http.StatusOK},
		{"fail open on an endpoint", "GET", "/v1/search", http.StatusOK},
		{"fail closed on login", "POST", "/v1/login", http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := g.do(t, tt.method, tt.path, "X-API-Key", "key_pro")
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := rateHeaders(resp.Header); got != [5]string{} {
				t.Errorf("headers %q without a store answer, want none", got)
			}
			if tt.wantStatus == http.StatusServiceUnavailable {
				p := decodeProblem(t, resp, body)
				if p.Limit != "login" || !strings.Contains(p.Detail, "unavailable") {
					t.Errorf("problem %+v, want limit login and a detail saying the store is unavailable", p)
				}
				if strings.Contains(body, "connection refused") {
					t.Errorf("body %q shows the store's error to the client", body)
				}
			}
		})
	}
	if got := testutil.ToFloat64(counterFrom(t, g.reg, "sluice_gateway_store_errors_total", nil)); got != 3 {
		t.Errorf("store errors counted %v, want 3 (one call per request, shadow limits in it)", got)
	}
	if got := testutil.ToFloat64(mustCounter(t, g.reg, "error", "")); got != 3 {
		t.Errorf("error decisions counted %v, want 3", got)
	}
	if !strings.Contains(g.log.String(), "connection refused") {
		t.Errorf("log lacks the store error:\n%s", g.log.String())
	}
}

// slowStore blocks until the context ends.
type slowStore struct{}

func (slowStore) Take(ctx context.Context, _ *limit.Request) (limit.Decision, error) {
	<-ctx.Done()
	return limit.Decision{}, ctx.Err()
}

func TestTimeoutFailsOpen(t *testing.T) {
	g := newTestGateway(t, testRules, func(c *gateway.Config) {
		c.Store = slowStore{}
		c.Timeout = 5 * time.Millisecond
	})
	if resp, _ := g.do(t, "GET", "/", "X-API-Key", "k"); resp.StatusCode != http.StatusOK {
		t.Errorf("store past its timeout: status %d, want 200 (fail open)", resp.StatusCode)
	}
	if resp, _ := g.do(t, "POST", "/v1/login", "X-API-Key", "k"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("store past its timeout under a fail-closed limit: status %d, want 503", resp.StatusCode)
	}
}

func TestMetrics(t *testing.T) {
	g := newTestGateway(t, testRules, nil)
	for range 12 {
		g.do(t, "GET", "/", "X-API-Key", "key_free")
	}
	for _, tt := range []struct {
		outcome, limit string
		want           float64
	}{{"allowed", "s", 10}, {"refused", "s", 2}} {
		if got := testutil.ToFloat64(mustCounter(t, g.reg, tt.outcome, tt.limit)); got != tt.want {
			t.Errorf("decisions{outcome=%q,limit=%q} = %v, want %v", tt.outcome, tt.limit, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(g.reg, "sluice_gateway_check_duration_seconds"); err != nil || n != 1 {
		t.Errorf("check latency histogram: %d series, %v; want 1", n, err)
	}
	if problems, err := testutil.GatherAndLint(g.reg); err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %v", problems, err)
	}
}

func TestNoLimitsPassesThrough(t *testing.T) {
	g := newTestGateway(t, "rules: [{scope: ip, limits: [{name: ip, rate: 1, per: 1s}]}]", nil)
	for range 3 {
		resp, _ := g.do(t, "GET", "/", "X-API-Key", "k")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("key with no rule: status %d RateLimit %q, want 200 and no headers", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
}

func TestNewValidates(t *testing.T) {
	set, _ := rules.Parse("t.yaml", []byte("rules: [{scope: default, limits: [{name: s, rate: 1, per: 1s}]}]"))
	reg := prometheus.NewRegistry()
	if _, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  gateway.Config
		want string
	}{
		{"no rules", gateway.Config{}, "Rules is nil"},
		{"negative timeout", gateway.Config{Rules: gateway.StaticRules(set), Timeout: -time.Second}, "Timeout -1s is negative"},
		{"invalid prefix", gateway.Config{Rules: gateway.StaticRules(set), TrustedProxies: []netip.Prefix{{}}}, "TrustedProxies[0]"},
		{"metrics registered twice", gateway.Config{Rules: gateway.StaticRules(set), Registerer: reg}, "register metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error holding %q", err, tt.want)
			}
		})
	}
}

func TestPolicyOfEachAlgorithm(t *testing.T) {
	// A bucket's quota is its burst over the time it takes to fill; a
	// window's is its count over its period.
	tests := []struct {
		alg, limit string
		wantPolicy string
		wantRL     string
	}{
		{"token_bucket", "{name: a, rate: 10, per: 1m, burst: 5}", `"a";q=5;w=30`, `"a";r=4;t=6`},
		{"gcra", "{name: a, rate: 10, per: 1m, burst: 5, algorithm: gcra}", `"a";q=5;w=30`, `"a";r=4;t=6`},
		{"fixed_window", "{name: a, rate: 10, per: 1m, algorithm: fixed_window}", `"a";q=10;w=60`, `"a";r=9;t=60`},
		{"sliding_window", "{name: a, rate: 10, per: 1m, algorithm: sliding_window}", `"a";q=10;w=60`, `"a";r=9;t=60`},
		{"sliding_log", "{name: a, rate: 10, per: 1m, algorithm: sliding_log}", `"a";q=10;w=60`, `"a";r=9;t=60`},
	}
	for _, tt := range tests {
		t.Run(tt.alg, func(t *testing.T) {
			g := newTestGateway(t, "rules: [{scope: default, limits: ["+tt.limit+"]}]", nil)
			resp, _ := g.do(t, "GET", "/", "X-API-Key", "k")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != tt.wantPolicy {
				t.Errorf("RateLimit-Policy %q, want %q", got, tt.wantPolicy)
			}
			if got := resp.Header.Get("RateLimit"); got != tt.wantRL {
				t.Errorf("RateLimit %q, want %q", got, tt.wantRL)
			}
		})
	}
}

// TestPathSpellings: another spelling of an endpoint's path either reaches
// the endpoint's limit or is refused with 400; it never passes unlimited.
func TestPathSpellings(t *testing.T) {
	const ruleYAML = `
endpoints:
  - {name: login, method: POST, path: /v1/login}
rules:
  - scope: endpoint
    match: {endpoint: login}
    limits: [{name: login, rate: 1, per: 1h}]
    fail_mode: closed
`
	for _, tc := range []struct {
		path string
		want int // the status of a second request, after the first took the one token
	}{
		{"/v1/login", http.StatusTooManyRequests},
		{"/V1/LOGIN", http.StatusTooManyRequests},
		{"/v1/login;x=1", http.StatusTooManyRequests},
		{"/v1//login/", http.StatusTooManyRequests},
		{"/v1/login.", http.StatusBadRequest},
		{"/v1/login%20", http.StatusBadRequest},
		{`/v1\login`, http.StatusBadRequest},
	} {
		t.Run(tc.path, func(t *testing.T) {
			g := newTestGateway(t, ruleYAML, nil)
			if resp, _ := g.do(t, "POST", "/v1/login", "X-API-Key", "k"); resp.StatusCode != http.StatusOK {
				t.Fatalf("first login: status %d", resp.StatusCode)
			}
			resp, body := g.do(t, "POST", tc.path, "X-API-Key", "k")
			if resp.StatusCode != tc.want {
				t.Errorf("POST %s after the login's one token: status %d, want %d; %s", tc.path, resp.StatusCode, tc.want, body)
			}
		})
	}
}

// TestUnlimitedRequestsAreEvents: a request no limit applies to still
// makes an Event, so that the rules service can compare a canary that
// starts limiting such traffic.
func TestUnlimitedRequestsAreEvents(t *testing.T) {
	g := newTestGateway(t, "rules: [{scope: ip, limits: [{name: ip, rate: 5, per: 1s}]}]", nil)
	if resp, _ := g.do(t, "GET", "/", "X-API-Key", "k"); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.events) != 1 || g.events[0].Source != limit.Unlimited || !g.events[0].Decision.Allowed || len(g.events[0].Limits) != 0 {
		t.Fatalf("events %+v, want one allowed event from %q with no limits", g.events, limit.Unlimited)
	}
}
