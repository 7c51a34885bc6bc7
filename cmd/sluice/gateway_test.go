package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDefaultGateway(t *testing.T) {
	// Everything but the address is the default; the address is chosen
	// free at runtime so the test cannot collide with another run.
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0")

	resp, body := get(t, "GET", p.URL+"/", "X-API-Key", "demo")
	if resp.StatusCode != 200 {
		t.Fatalf("first request: status %d, want 200", resp.StatusCode)
	}
	var answer struct{ Message, Path string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || answer.Path != "/" {
		t.Errorf("built-in answer %q (%v), want a JSON naming path /", body, err)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"s";q=5;w=3` {
		t.Errorf("RateLimit-Policy %q, want the demo plan's \"s\";q=5;w=3", got)
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "4" {
		t.Errorf("X-RateLimit-Remaining %q, want 4", got)
	}
	// The demo key refills 2 a second, so a quick loop empties its burst
	// of 5 long before 40 requests.
	for i := 2; i <= 40; i++ {
		resp, body = get(t, "GET", p.URL+"/", "X-API-Key", "demo")
		if resp.StatusCode != 200 {
			break
		}
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("40 quick requests on a burst of 5: last status %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("429 Content-Type %q, want application/problem+json", got)
	}
	if !strings.Contains(body, `"limit":"s"`) || !strings.Contains(body, "quota-exceeded") {
		t.Errorf("429 body %s, want the limit and the quota-exceeded type", body)
	}
	if resp.Header.Get("RateLimit") == "" || resp.Header.Get("X-RateLimit-Reset") == "" {
		t.Errorf("429 without budget headers: %v", resp.Header)
	}

	// No key: the ip rule.
	resp, _ = get(t, "GET", p.URL+"/")
	if got := resp.Header.Get("RateLimit-Policy"); resp.StatusCode != 200 || got != `"ip";q=5;w=5` {
		t.Errorf("no key: status %d RateLimit-Policy %q, want 200 and \"ip\";q=5;w=5", resp.StatusCode, got)
	}
	// Health, unlimited.
	for range 10 {
		if resp, _ := get(t, "GET", p.URL+"/healthz"); resp.StatusCode != 200 {
			t.Fatalf("/healthz: status %d, want 200", resp.StatusCode)
		}
	}
	// A 200 KB header is refused by the server, which stays up.
	resp, _ = get(t, "GET", p.URL+"/", "X-API-Key", strings.Repeat("k", 200<<10))
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("200 KB header: status %d, want 431", resp.StatusCode)
	}
	resp, _ = get(t, "GET", p.URL+"/", "X-API-Key", strings.Repeat("k", 300))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("300-byte key: status %d, want 400", resp.StatusCode)
	}
	if resp, _ := get(t, "GET", p.URL+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("after hostile requests /healthz: status %d, want 200", resp.StatusCode)
	}
}

const proxyRules = `
keys:
  key_a: {plan: gold}
endpoints:
  - {name: report, method: POST, path: /v1/report, cost: 3}
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1h, burst: 2}]
  - scope: plan
    match: {plan: gold}
    limits: [{name: s, rate: 1, per: 1h, burst: 6}]
  - scope: ip
    limits: [{name: ip, rate: 1, per: 1h, burst: 1}]
`

func TestProxyWithRulesFile(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "hello")
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.RequestURI())
	}))
	defer upstream.Close()
	rules := writeFile(t, "rules.yaml", proxyRules)
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--upstream", upstream.URL, "--rules", rules)

	tests := []struct {
		method, path, key string
		wantStatus        int
		wantRemaining     string
	}{
		{"GET", "/v1/items?page=2", "key_a", 200, "5"},
		{"POST", "/v1/report", "key_a", 200, "2"}, // cost 3
		{"POST", "/v1/report", "key_a", 429, "2"},
		{"GET", "/v1/items", "key_a", 200, "1"},
		{"GET", "/v1/items", "other", 200, "1"}, // the default, its own bucket
		{"GET", "/v1/items", "", 200, "0"},      // the ip rule
		{"GET", "/v1/items", "", 429, "0"},
	}
	for i, tt := range tests {
		var hdr []string
		if tt.key != "" {
			hdr = []string{"Authorization", "Bearer " + tt.key}
		}
		resp, body := get(t, tt.method, p.URL+tt.path, hdr...)
		if resp.StatusCode != tt.wantStatus {
			t.Fatalf("step %d %s %s: status %d, want %d (%s)", i+1, tt.method, tt.path, resp.StatusCode, tt.wantStatus, body)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != tt.wantRemaining {
			t.Errorf("step %d: remaining %q, want %q", i+1, got, tt.wantRemaining)
		}
		if tt.wantStatus == 200 && (resp.Header.Get("X-Upstream") != "hello" || body != tt.method+" "+tt.path) {
			t.Errorf("step %d: body %q X-Upstream %q, want the upstream's answer", i+1, body, resp.Header.Get("X-Upstream"))
		}
		if tt.wantStatus == 429 && resp.Header.Get("X-Upstream") != "" {
			t.Errorf("step %d: a refused request reached the upstream", i+1)
		}
	}
}

func TestBadRulesFile(t *testing.T) {
	tests := []struct {
		name, rules string
		want        []string // in stderr
	}{
		{"zero rate", `
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1s}]
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 0, per: 1s}]
`, []string{"rules[1] (plan plan=pro)", "limits[0]", "rate 0 must be positive"}},
		{"unknown endpoint", `
rules:
  - scope: plan
    match: {plan: pro, endpoint: nope}
    limits: [{name: s, rate: 1, per: 1s}]
`, []string{"rules[0]", "match.endpoint", `"nope" is not a declared endpoint`}},
		{"bad period", `
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: soon}]
`, []string{"period \"soon\""}},
		{"unknown field", `
rules:
  - scope: default
    limit: [{name: s, rate: 1, per: 1s}]
`, []string{"field limit not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "bad.yaml", tt.rules)
			code, _, stderr := sluice.Run(t, "gateway", "--listen", "127.0.0.1:0", "--rules", path)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, want := range append([]string{path}, tt.want...) {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := t.TempDir() + "/nope.yaml"
		code, _, stderr := sluice.Run(t, "gateway", "--listen", "127.0.0.1:0", "--rules", path)
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "no such file") {
			t.Errorf("exit code %d, stderr %q; want 1 and the missing file named", code, stderr)
		}
	})
}

func TestSIGTERMFinishesRequestsInFlight(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "slow answer")
	}))
	defer upstream.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--upstream", upstream.URL)

	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(p.URL + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{resp.StatusCode, string(b), err}
	}()
	<-entered
	p.Signal(t, syscall.SIGTERM)
	// Once shutdown has begun the gateway takes no new connections; the
	// request in flight is still waiting on the upstream.
	addr := strings.TrimPrefix(p.URL, "http://")
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("gateway still accepting connections 30s after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	r := <-got
	if r.err != nil || r.status != 200 || r.body != "slow answer" {
		t.Errorf("request in flight at SIGTERM: %d %q %v, want 200 \"slow answer\"", r.status, r.body, r.err)
	}
	if code := p.Wait(t); code != 0 {
		t.Errorf("exit code after SIGTERM %d, want 0", code)
	}
	if !strings.Contains(p.Stderr(), "gateway stopped") {
		t.Errorf("stderr lacks the stop log:\n%s", p.Stderr())
	}
}

func TestMetricsEndpoint(t *testing.T) {
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	if p.MetricsURL == "" {
		t.Fatalf("no metrics address printed:\n%s", p.Stdout())
	}
	allowed, refused := 0, 0
	for range 15 {
		resp, _ := get(t, "GET", p.URL+"/", "X-API-Key", "demo")
		switch resp.StatusCode {
		case 200:
			allowed++
		case 429:
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("15 quick requests on a burst of 5: none refused")
	}
	resp, body := get(t, "GET", p.MetricsURL+"/metrics")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: status %d", resp.StatusCode)
	}
	for _, want := range []string{
		fmt.Sprintf(`sluice_gateway_decisions_total{limit="s",outcome="allowed",plan="demo",source="memory"} %d`, allowed),
		fmt.Sprintf(`sluice_gateway_decisions_total{limit="s",outcome="refused",plan="demo",source="memory"} %d`, refused),
		"sluice_gateway_check_duration_seconds_bucket",
		"sluice_gateway_store_errors_total 0",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if resp, body := get(t, "GET", p.MetricsURL+"/healthz"); resp.StatusCode != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("metrics /healthz: %d %s, want 200 ok", resp.StatusCode, body)
	}
}
