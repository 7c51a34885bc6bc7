package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// sourcedStore is a memstore that names a fixed source for every answer,
// or fails with err: how the lease store and the guard answer, without
// them.
type sourcedStore struct {
	*memstore.Store
	source limit.Source
	err    error
}

func (s *sourcedStore) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	if s.err != nil {
		return limit.Decision{Source: s.source}, s.err
	}
	d, err := s.Store.Take(ctx, req)
	d.Source = s.source
	return d, err
}

// plainStore is a store that does not say where its answers come from, as
// an embedding program's own store may not.
type plainStore struct{ limit.Store }

func (p plainStore) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	d, err := p.Store.Take(ctx, req)
	d.Source = ""
	return d, err
}

// sourceRules give every caller one request an hour, and a shadow limit,
// so one caller's two requests make an allowed, a refused and two shadow
// decisions.
const sourceRules = `
rules:
  - scope: default
    limits: [{name: h, rate: 1, per: 1h}]
  - scope: default
    mode: shadow
    limits: [{name: shadow_h, rate: 5, per: 1h}]
`

// versioned compiles ruleYAML as snapshot version v.
func versioned(t *testing.T, ruleYAML string, v int64) *rules.Set {
	t.Helper()
	set, err := rules.Parse("test.yaml", []byte(ruleYAML))
	if err != nil {
		t.Fatal(err)
	}
	if set, err = rules.Compile(set.Document(), v); err != nil {
		t.Fatal(err)
	}
	return set
}

func TestEventsAndMetricsSayTheSource(t *testing.T) {
	tests := []struct {
		name  string
		store func(now func() time.Time) limit.Store // nil: the default memstore
		want  limit.Source
	}{
		{"default memstore", nil, limit.FromMemory},
		{"memstore given", func(now func() time.Time) limit.Store { return memstore.New(memstore.Config{Now: now}) }, limit.FromMemory},
		{"store that cannot say", func(now func() time.Time) limit.Store {
			return plainStore{memstore.New(memstore.Config{Now: now})}
		}, limit.FromStore},
		{"sourced store: lease", func(now func() time.Time) limit.Store {
			return &sourcedStore{Store: memstore.New(memstore.Config{Now: now}), source: limit.FromLease}
		}, limit.FromLease},
		{"sourced store: local fallback", func(now func() time.Time) limit.Store {
			return &sourcedStore{Store: memstore.New(memstore.Config{Now: now}), source: limit.FromLocalFallback}
		}, limit.FromLocalFallback},
		{"sourced store saying nothing", func(now func() time.Time) limit.Store {
			return &sourcedStore{Store: memstore.New(memstore.Config{Now: now})}
		}, limit.FromStore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, sourceRules, func(c *gateway.Config) {
				c.Rules = gateway.StaticRules(versioned(t, sourceRules, 7))
				if tt.store != nil {
					c.Store = tt.store(c.Now)
				}
			})
			for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				if resp, _ := g.do(t, "GET", "/", "X-API-Key", "key_a"); resp.StatusCode != want {
					t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
				}
			}
			g.mu.Lock()
			events := g.events
			g.mu.Unlock()
			if len(events) != 4 {
				t.Fatalf("got %d events, want 4 (2 enforced, 2 shadow)", len(events))
			}
			for _, e := range events {
				if e.Source != tt.want || e.RulesVersion != 7 {
					t.Errorf("event %s shadow=%v: got source %q version %d, want %q and 7", e.Key, e.Shadow, e.Source, e.RulesVersion, tt.want)
				}
			}
			for _, c := range []struct {
				outcome string
				want    float64
			}{{"allowed", 1}, {"refused", 1}, {"shadow_allowed", 2}} {
				labels := map[string]string{"outcome": c.outcome, "source": string(tt.want)}
				if got := testutil.ToFloat64(counterFrom(t, g.reg, "sluice_gateway_decisions_total", labels)); got != c.want {
					t.Errorf("decisions%v = %v, want %v", labels, got, c.want)
				}
			}
		})
	}
}

func TestFailClosedAnswerSaysItsSource(t *testing.T) {
	// The guard refuses a fail_mode closed limit while Redis is down with an
	// error and source fail-closed: a 503, counted and logged as such.
	store := &sourcedStore{source: "fail-closed", err: errors.New("guard: limit \"login\" fails closed: shared rate limit store unavailable")}
	g := newTestGateway(t, testRules, func(c *gateway.Config) { c.Store = store })
	resp, _ := g.do(t, "POST", "/v1/login", "X-API-Key", "key_pro")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	labels := map[string]string{"outcome": "error", "source": "fail-closed"}
	if got := testutil.ToFloat64(counterFrom(t, g.reg, "sluice_gateway_decisions_total", labels)); got != 1 {
		t.Errorf("decisions%v = %v, want 1", labels, got)
	}
	lines := logLines(t, g.log.String(), "rate limit store failed; refusing under a fail-closed limit")
	if len(lines) != 1 {
		t.Fatalf("got %d fail-closed lines, want 1:\n%s", len(lines), g.log.String())
	}
	if l := lines[0]; l["level"] != "INFO" || l["source"] != "fail-closed" || l["limit"] != "login" {
		t.Errorf("fail-closed line %v, want level INFO, source fail-closed, limit login", l)
	}
}

// down is a shared store that always fails, for the guard to guard.
type down struct{}

func (down) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{}, errors.New("connection refused")
}

func (down) TakeUpTo(context.Context, *limit.Request, int64) (int64, limit.Decision, error) {
	return 0, limit.Decision{}, errors.New("connection refused")
}

func TestFailClosedRetryAfter(t *testing.T) {
	// The guard knows when it next asks the shard (its breaker's pause):
	// the 503 says so, in whole seconds rounded up.
	for _, tc := range []struct {
		pause time.Duration
		want  string
	}{
		{1500 * time.Millisecond, "2"},
		{30 * time.Second, "30"},
	} {
		clk := limittest.NewClock(start)
		g, err := guard.New(down{}, guard.Config{TripAfter: 1, Pause: tc.pause, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		gw := newTestGateway(t, testRules, func(c *gateway.Config) { c.Store = g })
		resp, body := gw.do(t, "POST", "/v1/login", "X-API-Key", "key_pro")
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("pause %v: status %d, want 503", tc.pause, resp.StatusCode)
		}
		if got := resp.Header.Get("Retry-After"); got != tc.want {
			t.Errorf("pause %v: Retry-After %q, want %q", tc.pause, got, tc.want)
		}
		if p := decodeProblem(t, resp, body); p.RetryAfterMillis != tc.pause.Milliseconds() {
			t.Errorf("pause %v: retry_after_ms %d, want %d", tc.pause, p.RetryAfterMillis, tc.pause.Milliseconds())
		}
	}
	// A store that cannot say when to retry gives no Retry-After.
	gw := newTestGateway(t, testRules, func(c *gateway.Config) { c.Store = failingStore{} })
	if resp, _ := gw.do(t, "POST", "/v1/login", "X-API-Key", "key_pro"); resp.Header.Get("Retry-After") != "" {
		t.Errorf("a plain store error: Retry-After %q, want none", resp.Header.Get("Retry-After"))
	}
}

// logLines returns the JSON log lines of logs with message msg.
func logLines(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// hashOf is how the decision log writes a store key.
func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	kind, _, _ := strings.Cut(key, ":")
	return kind + ":" + hex.EncodeToString(sum[:8])
}

// logRules refuse every caller's second request of the hour, and one API
// key's third, by a rule of its own.
const logRules = `
rules:
  - scope: default
    limits: [{name: h, rate: 1, per: 1h}]
  - scope: key
    match: {key: sekrit_vip}
    limits: [{name: h, rate: 2, per: 1h}]
`

func TestDecisionLogIsSampledPerKey(t *testing.T) {
	g := newTestGateway(t, logRules, func(c *gateway.Config) { c.Rules = gateway.StaticRules(versioned(t, logRules, 3)) })
	send := func(n int, header ...string) {
		t.Helper()
		for range n {
			g.do(t, "GET", "/", header...)
		}
	}
	// At one instant: many refusals of each of three callers.
	send(10, "X-API-Key", "sekrit_a")
	send(10, "X-API-Key", "sekrit_vip")
	send(10)
	lines := logLines(t, g.log.String(), "rate limit decision")
	want := []struct{ key, limit, scope string }{
		{hashOf("k:sekrit_a"), "h", "default"},
		{hashOf("k:sekrit_vip"), "h", "key"},
		{hashOf("ip:127.0.0.1"), "h", "default"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d decision lines, want %d (one per key):\n%s", len(lines), len(want), g.log.String())
	}
	for i, w := range want {
		l := lines[i]
		rule, _ := l["rule"].(map[string]any)
		if l["key"] != w.key || l["limit"] != w.limit || rule["scope"] != w.scope || l["outcome"] != "refused" ||
			l["source"] != "memory" || l["rules_version"] != 3.0 || l["retry_after_ms"] == nil || l["level"] != "INFO" {
			t.Errorf("line %d: %v\nwant key %s, limit %s, rule scope %s, outcome refused, source memory, rules_version 3, retry_after_ms, level INFO",
				i, l, w.key, w.limit, w.scope)
		}
	}
	if rule, _ := lines[1]["rule"].(map[string]any); rule["key"] != hashOf("k:sekrit_vip") {
		t.Errorf("key rule logged as %v, want its key hashed as %s", rule, hashOf("k:sekrit_vip"))
	}

	// A second later each key may have one line more.
	g.clock.Advance(time.Second)
	send(10, "X-API-Key", "sekrit_a")
	if got := len(logLines(t, g.log.String(), "rate limit decision")); got != len(want)+1 {
		t.Errorf("a second later: %d decision lines, want %d", got, len(want)+1)
	}
	if logs := g.log.String(); strings.Contains(logs, "sekrit") || strings.Contains(logs, "127.0.0.1") {
		t.Errorf("the log holds an API key or an address:\n%s", logs)
	}
}

func TestLocalFallbackAnswersAreLogged(t *testing.T) {
	g := newTestGateway(t, logRules, func(c *gateway.Config) {
		c.Store = &sourcedStore{Store: memstore.New(memstore.Config{Now: c.Now}), source: limit.FromLocalFallback}
	})
	for range 3 {
		g.do(t, "GET", "/", "X-API-Key", "sekrit_vip") // allowed twice, then refused
	}
	lines := logLines(t, g.log.String(), "rate limit decision")
	if len(lines) != 1 || lines[0]["outcome"] != "allowed" || lines[0]["source"] != "local-fallback" {
		t.Errorf("got decision lines %v, want one: the first allowed answer, from local-fallback", lines)
	}
}
