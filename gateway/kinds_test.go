package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/inflight"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// kindsRules gives keys k1 and k2 of org acme, and k3 of none: quotas and
// concurrency limits of each kind (key, org, shadow of both).
const kindsRules = `
keys:
  k1: {plan: pro, org: acme}
  k2: {plan: pro, org: acme}
  k3: {plan: pro}
endpoints:
  - {name: hold, path: /hold}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 1000, per: 1s}]
    quotas: [{name: daily, count: 100, per: day}]
    concurrency: 5
  - scope: plan
    match: {plan: pro}
    mode: shadow
    quotas: [{name: daily, count: 3, per: day}]
    concurrency: 1
  - scope: org
    match: {org: acme}
    quotas: [{name: org-daily, count: 6, per: day}]
    concurrency: 2
`

// kindsFleet is three gateways over one Redis, each counting its shadow
// refusals by limit name.
type kindsFleet struct {
	pipes []*pipeline.Pipeline
	urls  []string

	mu     sync.Mutex
	shadow map[string]int // guarded by mu: would-be refusals by limit name
}

func newKindsFleet(t *testing.T, addrs []string, upstream http.Handler) *kindsFleet {
	t.Helper()
	set, err := rules.Parse("kinds.yaml", []byte(kindsRules))
	if err != nil {
		t.Fatal(err)
	}
	f := &kindsFleet{shadow: map[string]int{}}
	for range 3 {
		p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: addrs},
			Fleet: limit.Fleet{Gateways: 3}, Guard: guard.Config{Timeout: time.Second},
			Quota: quota.Config{Interval: time.Hour}, Inflight: inflight.Config{Timeout: slotLife}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		l, err := gateway.New(gateway.Config{Store: p, Rules: gateway.StaticRules(set), OnDecision: func(e gateway.Event) {
			if e.Shadow && e.Err == nil && !e.Decision.Allowed && e.Rules[e.Decision.Index].Mode == rules.Shadow {
				f.mu.Lock()
				f.shadow[e.Limits[e.Decision.Index].Name]++
				f.mu.Unlock()
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(l.Middleware(upstream))
		t.Cleanup(hs.Close)
		f.pipes, f.urls = append(f.pipes, p), append(f.urls, hs.URL)
	}
	return f
}

func (f *kindsFleet) get(ctx context.Context, gw int, key, path string) (*http.Response, gateway.Problem, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", f.urls[gw]+path, nil)
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	var prob gateway.Problem
	if err == nil {
		json.NewDecoder(resp.Body).Decode(&prob)
		resp.Body.Close()
	}
	return resp, prob, err
}

func (f *kindsFleet) shadowRefusals(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.shadow[name]
}

// TestShadowAndOrgKinds runs three gateways over standalone Redis and a
// 3-primary cluster with a key's quota and concurrency limit enforced,
// shadow ones tighter, and an org's of both: shadow quotas and concurrency
// limits never refuse but report their would-be refusals and count in
// Redis apart from the enforced ones; the org's quota and concurrency
// limit hold the sum of the org's keys.
func TestShadowAndOrgKinds(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Standalone(t)
		testShadowAndOrgKinds(t, []string{s.Addr()}, func(string) *redistest.Server { return s })
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		testShadowAndOrgKinds(t, c.Addrs(), func(k string) *redistest.Server {
			n, err := c.NodeForKey(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			return n
		})
	})
}

func testShadowAndOrgKinds(t *testing.T, addrs []string, node func(redisKey string) *redistest.Server) {
	release, release2 := make(chan struct{}), make(chan struct{})
	f := newKindsFleet(t, addrs, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch := map[string]chan struct{}{"/hold": release, "/hold2": release2}[r.URL.Path]
		if ch != nil {
			select {
			case <-ch:
			case <-r.Context().Done():
			}
		}
	}))
	rs := f.pipes[0].Redis()
	flush := func() {
		for _, p := range f.pipes {
			if err := p.Quotas().Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	counter := func(key string, q quota.Quota) int64 {
		id, _, _ := q.Window(time.Now())
		got, err := rs.ReadCounts(t.Context(), key, []string{q.CounterName(id)})
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	zcard := func(key string) int64 {
		k := rs.SlotsKey(key)
		v, err := node(k).Do(t.Context(), "ZCARD", k)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := v.(int64)
		return n
	}

	// Shadow quota: 3 a day, never refusing. Ten requests of k3 round the
	// fleet all pass; the shadow counter counts what it would have let
	// through, apart from the enforced one, and the rest are reported.
	// The fleet's views lag by at most N-1 = 2 (package quota's bound).
	const sent = 10
	for i := range sent {
		resp, _, err := f.get(t.Context(), i%3, "k3", "/x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("request %d of k3: got %d, want 200 (a shadow quota never refuses)", i, resp.StatusCode)
		}
		flush()
	}
	enforced := counter("k:k3", quota.Quota{Name: "daily", Period: quota.Day})
	shadowCount := counter("k:k3", quota.Quota{Name: "daily", Period: quota.Day, Shadow: true})
	refused := f.shadowRefusals("daily")
	if enforced != sent || shadowCount < 3 || shadowCount > 3+2 || int64(refused) != sent-shadowCount {
		t.Errorf("k3: enforced counter %d (want %d), shadow counter %d (want 3 to 5), %d shadow refusals reported (want %d)",
			enforced, sent, shadowCount, refused, sent-shadowCount)
	}

	// Concurrency: k1 holds at gateway 0 and k2 at gateway 1, the org's
	// two; k1's second, at gateway 2, is refused naming the org, and holds
	// no slot of k1's own. k1's second shadow slot would be refused (a
	// shadow limit of 1), reported, and passes all the same.
	done := make(chan int, 2)
	hold := func(gw int, key string) {
		go func() {
			resp, _, err := f.get(context.Background(), gw, key, "/hold")
			if err != nil {
				done <- -1
				return
			}
			done <- resp.StatusCode
		}()
	}
	before := f.shadowRefusals("concurrency")
	hold(0, "k1")
	hold(1, "k2")
	eventually(t, "the org's two slots taken", func() bool { return zcard("o:acme") == 2 })
	// The shadow slot is taken after the org's: wait for it too.
	eventually(t, "k1's shadow slot taken", func() bool { return zcard("shadow:k:k1") == 1 })
	if k1, sh := zcard("k:k1"), zcard("shadow:k:k1"); k1 != 1 || sh != 1 {
		t.Errorf("k1's slots: %d, shadow %d; want 1 and 1", k1, sh)
	}
	resp, prob, err := f.get(t.Context(), 2, "k1", "/hold")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || prob.Type != gateway.ConcurrencyExceeded || !strings.Contains(prob.Detail, "organization") ||
		prob.Rule == nil || prob.Rule.Scope != rules.ScopeOrg || prob.Rule.Org != "acme" {
		t.Errorf("k1's second: got %d %+v, want 429 naming the org's concurrency rule", resp.StatusCode, prob)
	}
	if n := zcard("k:k1"); n != 1 {
		t.Errorf("after the org refused: k1 holds %d slots, want 1 (its refused request's given back)", n)
	}
	close(release)
	for range 2 {
		if code := <-done; code != 200 {
			t.Errorf("held request: got %d, want 200", code)
		}
	}
	for _, k := range []string{"o:acme", "k:k1", "k:k2", "shadow:k:k1", "shadow:k:k2"} {
		eventually(t, k+" released", func() bool { return zcard(k) == 0 })
	}
	// k3's shadow limit of 1: two held at once both pass, the second's
	// shadow slot refused and reported, and only one shadow slot held.
	hold2 := func(gw int) {
		go func() {
			resp, _, err := f.get(context.Background(), gw, "k3", "/hold2")
			if err != nil {
				done <- -1
				return
			}
			done <- resp.StatusCode
		}()
	}
	hold2(0)
	eventually(t, "k3's first slot", func() bool { return zcard("shadow:k:k3") == 1 })
	hold2(1)
	eventually(t, "k3's second request in flight", func() bool {
		return zcard("k:k3") == 2 && f.shadowRefusals("concurrency")-before >= 1
	})
	if sh, got := zcard("shadow:k:k3"), f.shadowRefusals("concurrency")-before; sh != 1 || got != 1 {
		t.Errorf("k3 holding two: %d shadow slots (want 1), %d shadow concurrency refusals reported (want 1)", sh, got)
	}
	close(release2)
	for range 2 {
		if code := <-done; code != 200 {
			t.Errorf("k3's held request: got %d, want 200 (a shadow limit never refuses)", code)
		}
	}
	for _, k := range []string{"k:k3", "shadow:k:k3"} {
		eventually(t, k+" released", func() bool { return zcard(k) == 0 })
	}
	// Org quota: 6 a day for k1 and k2 together, each with 100 of its own,
	// less what the requests above used.
	flush()
	prior := counter("o:acme", quota.Quota{Name: "org-daily", Period: quota.Day})
	priorKeys := counter("k:k1", quota.Quota{Name: "daily", Period: quota.Day}) + counter("k:k2", quota.Quota{Name: "daily", Period: quota.Day})
	admitted := int64(0)
	for i := range 12 {
		key := []string{"k1", "k2"}[i%2]
		resp, prob, err := f.get(t.Context(), i%3, key, "/x")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.StatusCode == 200:
			admitted++
		case resp.StatusCode != 429 || prob.Limit != "org-daily":
			t.Errorf("request %d of %s: got %d %+v, want 200 or 429 naming org-daily", i, key, resp.StatusCode, prob)
		}
		flush()
	}
	orgCount := counter("o:acme", quota.Quota{Name: "org-daily", Period: quota.Day})
	if prior+admitted < 6 || prior+admitted > 6+2 || orgCount != prior+admitted {
		t.Errorf("org quota of 6: %d admitted after %d (want 6 to 8 in all), org counter %d (want %d)", admitted, prior, orgCount, prior+admitted)
	}
	if k1, k2 := counter("k:k1", quota.Quota{Name: "daily", Period: quota.Day}), counter("k:k2", quota.Quota{Name: "daily", Period: quota.Day}); k1+k2 != priorKeys+admitted {
		t.Errorf("keys' own counters %d + %d, want the %d admitted", k1, k2, priorKeys+admitted)
	}

}
