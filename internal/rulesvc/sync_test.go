package rulesvc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// startClient runs a rules client for gateway id against base until the
// test ends.
func startClient(t *testing.T, base, id, region string, cfg rulesync.Config) *rulesync.Client {
	t.Helper()
	c, _ := startStoppableClient(t, base, id, region, cfg)
	return c
}

// startStoppableClient is startClient that the test may also stop early.
func startStoppableClient(t *testing.T, base, id, region string, cfg rulesync.Config) (*rulesync.Client, func()) {
	t.Helper()
	cfg.URL, cfg.Gateway, cfg.Region = base, id, region
	if cfg.Token == "" {
		cfg.Token = gatewayToken
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Wait == 0 {
		cfg.Wait = 2 * time.Second
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = 100 * time.Millisecond
	}
	c, err := rulesync.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return c, stop
}

func version(c *rulesync.Client) int64 {
	if s := c.Current(); s != nil {
		return s.Version
	}
	return 0
}

// waitVersion waits until every client runs at least version v and returns
// how long that took.
func waitVersion(t *testing.T, v int64, cs ...*rulesync.Client) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, 10*time.Second, fmt.Sprintf("every gateway at version %d", v), func() bool {
		for _, c := range cs {
			if version(c) < v {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}

// waitFleet waits until the service counts n gateways in the fleet: they
// polled and reported, so they may be canaries.
func waitFleet(t *testing.T, base string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("a fleet of %d", n), func() bool {
		var res struct{ Fleet rulesapi.Fleet }
		mustCall(t, base, "GET", "/admin/v1/fleet", nil, 200, &res)
		return res.Fleet.Total == n
	})
}

func stableVersion(t *testing.T, base string) int64 {
	t.Helper()
	var st rulesvc.RolloutStatus
	mustCall(t, base, "GET", "/admin/v1/rollout", nil, 200, &st)
	return st.Stable
}

func TestOverrideReachesEveryGatewayAtOnce(t *testing.T) {
	t.Parallel()
	// The seeded rules wait in a long canary; the override must not.
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL
	seed(t, base)
	var cs []*rulesync.Client
	for i := range 3 {
		cs = append(cs, startClient(t, base, fmt.Sprintf("gw-%d", i), "eu", rulesync.Config{}))
	}
	waitVersion(t, stableVersion(t, base), cs...)
	waitFleet(t, base, len(cs))

	var res struct{ Snapshot rulesvc.Published }
	start := time.Now()
	mustCall(t, base, "PUT", "/admin/v1/overrides/key_pro", map[string]any{
		"limits":     []map[string]any{{"name": "s", "rate": 1, "per": "1m"}},
		"expires_at": time.Now().Add(time.Hour).Format(time.RFC3339), "reason": "INC-7: retry storm"}, 200, &res)
	if res.Snapshot.Emergency == 0 || res.Snapshot.Rollout != "canary" {
		t.Fatalf("got %+v, want an emergency version for everyone and the full rule set as a canary", res.Snapshot)
	}
	waitVersion(t, res.Snapshot.Emergency, cs...)
	t.Logf("override reached all %d gateways %v after the admin call was sent", len(cs), time.Since(start))
	canaries := 0
	for i, c := range cs {
		set := c.Current()
		got := set.Resolve(time.Now(), rules.Query{APIKey: "key_pro", Endpoint: "search"})
		var names []string
		for _, l := range got.Limits {
			names = append(names, fmt.Sprintf("%s=%d/%v", l.Name, l.Count, l.Period))
		}
		if set.Version == res.Snapshot.Version {
			canaries++
			// The canary runs everything: the override and the pending rules.
			if want := "s=1/1m0s search=5/1s"; strings.Join(names, " ") != want {
				t.Errorf("canary gateway %d: got limits %v, want %s", i, names, want)
			}
			continue
		}
		// The rest run the stable rules plus the override, not the pending
		// plan rule.
		if want := "s=1/1m0s"; strings.Join(names, " ") != want {
			t.Errorf("gateway %d (version %d): got limits %v, want %s", i, set.Version, names, want)
		}
	}
	if canaries != 1 {
		t.Errorf("got %d gateways on the canary version %d, want 1", canaries, res.Snapshot.Version)
	}
}

func TestChangeThroughOneReplicaReachesGatewayOfAnother(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	cfg := rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}}
	a := startReplica(t, schema, cfg)
	b := startReplica(t, schema, cfg)
	c := startClient(t, b.srv.URL, "gw-b", "us", rulesync.Config{})
	waitVersion(t, stableVersion(t, a.srv.URL), c)

	var res struct{ Snapshot rulesvc.Published }
	start := time.Now()
	mustCall(t, a.srv.URL, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 7, "per": "1s"}}}, 201, &res)
	waitVersion(t, res.Snapshot.Version, c)
	t.Logf("change through replica A reached the gateway on replica B %v after the admin call was sent", time.Since(start))
	got := c.Current().Resolve(time.Now(), rules.Query{APIKey: "anyone"})
	if len(got.Limits) != 1 || got.Limits[0].Count != 7 {
		t.Errorf("got limits %+v, want the new default of 7 a second", got.Limits)
	}
}

func TestFleetSizeCountsSubscribedGateways(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Refresh: 100 * time.Millisecond, PollTimeout: time.Second,
		GatewayTTL: 3 * time.Second})
	cs := []*rulesync.Client{
		startClient(t, r.srv.URL, "gw-1", "eu", rulesync.Config{Wait: 200 * time.Millisecond}),
		startClient(t, r.srv.URL, "gw-2", "eu", rulesync.Config{Wait: 200 * time.Millisecond}),
	}
	gw3, stop3 := startStoppableClient(t, r.srv.URL, "gw-3", "us", rulesync.Config{Wait: 200 * time.Millisecond})
	cs = append(cs, gw3)
	eventually(t, 10*time.Second, "every gateway sees a fleet of 3: eu 2, us 1", func() bool {
		for _, c := range cs {
			f := c.FleetSize()
			if f.Total != 3 || f.Regions["eu"] != 2 || f.Regions["us"] != 1 {
				return false
			}
		}
		return true
	})
	// A gateway that stops polling drops out after the TTL.
	stop3()
	eventually(t, 10*time.Second, "the others see a fleet of 2, eu only", func() bool {
		f := cs[0].FleetSize()
		return f.Total == 2 && f.Regions["eu"] == 2 && f.Regions["us"] == 0
	})
}

// canaryFleet is gateways limiting real requests with rules from the
// service, and reporting their decisions to it.
type canaryFleet struct {
	keys     []string // the API keys drive sends, in turn; nil for four free-plan keys
	ids      []string
	clients  map[string]*rulesync.Client
	limiters map[string]http.Handler
}

func startCanaryFleet(t *testing.T, base string, n int) *canaryFleet {
	t.Helper()
	f := &canaryFleet{clients: map[string]*rulesync.Client{}, limiters: map[string]http.Handler{}}
	for i := range n {
		id := fmt.Sprintf("gw-%d", i)
		c := startClient(t, base, id, "eu", rulesync.Config{})
		lim, err := gateway.New(gateway.Config{Rules: c, OnDecision: func(e gateway.Event) {
			c.Observe(rulesync.Outcome{Version: e.RulesVersion, Key: e.Key, Shadow: e.Shadow, Limits: e.Limits, Rules: e.Rules, Decision: e.Decision, Err: e.Err})
		}})
		if err != nil {
			t.Fatal(err)
		}
		f.ids = append(f.ids, id)
		f.clients[id] = c
		f.limiters[id] = lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	}
	return f
}

// drive sends requests of f.keys, or of four free-plan keys, to every
// gateway until stop is called.
func (f *canaryFleet) drive(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range f.ids {
		h := f.limiters[id]
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				req := httptest.NewRequest("GET", "/v1/items", nil)
				key := fmt.Sprintf("key_free_%d", i%4)
				if len(f.keys) > 0 {
					key = f.keys[i%len(f.keys)]
				}
				req.Header.Set("X-API-Key", key)
				h.ServeHTTP(httptest.NewRecorder(), req)
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

func rolloutOf(t *testing.T, base string, v int64) rulesvc.Rollout {
	t.Helper()
	var st rulesvc.RolloutStatus
	mustCall(t, base, "GET", "/admin/v1/rollout", nil, 200, &st)
	for _, ro := range st.Rollouts {
		if ro.Version == v {
			return ro
		}
	}
	t.Fatalf("no rollout of version %d", v)
	return rulesvc.Rollout{}
}

func TestCanary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rate      int64 // the free plan's new limit a second: 1 refuses almost all
		window    time.Duration
		wantState string
		wantWhy   string
	}{
		// A halt comes as soon as the samples do: the long window only
		// keeps a slow machine from promoting first.
		{"refusing change is halted", 1, 20 * time.Second, "halted", "canary refused"},
		{"harmless change is promoted", 5000, 3 * time.Second, "promoted", "canary window over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			r := startReplica(t, newSchema(t), rulesvc.Config{Registerer: reg, Refresh: 200 * time.Millisecond, Canary: rulesvc.Canary{
				Fraction: 0.25, Window: tt.window, Threshold: 0.2, MinSample: 30, Check: 100 * time.Millisecond}})
			base := r.srv.URL
			for i := range 4 {
				mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/keys/key_free_%d", i), map[string]any{"plan": "free"}, 200, nil)
			}
			var plan struct{ After rulesvc.RuleView }
			mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "plan", "match": map[string]any{"plan": "free"},
				"limits": []map[string]any{{"name": "s", "rate": 10000, "per": "1s"}}}, 201, &plan)
			f := startCanaryFleet(t, base, 4)
			// The first rules skip the canary: nothing to compare with.
			if got := stableVersion(t, base); got != plan.After.Version {
				t.Fatalf("got stable version %d after the first rules, want them, %d", got, plan.After.Version)
			}
			var all []*rulesync.Client
			for _, id := range f.ids {
				all = append(all, f.clients[id])
			}
			waitVersion(t, plan.After.Version, all...)
			waitFleet(t, base, len(all))
			stop := f.drive(t)

			var res struct{ Snapshot rulesvc.Published }
			mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", plan.After.ID), map[string]any{"scope": "plan",
				"match": map[string]any{"plan": "free"}, "limits": []map[string]any{{"name": "s", "rate": tt.rate, "per": "1s", "burst": 1}}},
				200, &res)
			v := res.Snapshot.Version
			if res.Snapshot.Rollout != "canary" {
				t.Fatalf("got rollout %q, want canary", res.Snapshot.Rollout)
			}
			ro := rolloutOf(t, base, v)
			if len(ro.Canaries) != 1 {
				t.Fatalf("got canaries %v, want one of 4 gateways at fraction 0.25", ro.Canaries)
			}
			canary := f.clients[ro.Canaries[0]]
			waitVersion(t, v, canary)
			if !canary.Canary() {
				t.Errorf("gateway %s on version %d does not know it is the canary", ro.Canaries[0], v)
			}
			for _, id := range f.ids {
				if id != ro.Canaries[0] && version(f.clients[id]) >= v {
					t.Errorf("gateway %s outside the canary got version %d during the canary", id, version(f.clients[id]))
				}
			}
			eventually(t, 20*time.Second+tt.window, "the rollout decided", func() bool { return rolloutOf(t, base, v).State != "canary" })
			stop()
			ro = rolloutOf(t, base, v)
			if ro.State != tt.wantState || !strings.Contains(ro.Reason, tt.wantWhy) {
				t.Fatalf("got state %q reason %q, want %s and a reason with %q", ro.State, ro.Reason, tt.wantState, tt.wantWhy)
			}
			t.Logf("version %d %s: %s", v, ro.State, ro.Reason)
			if tt.wantState == "promoted" {
				waitVersion(t, v, all...)
				eventually(t, 10*time.Second, "the canary told it is one no more", func() bool { return !canary.Canary() })
				return
			}
			// Halted: the canary goes back to the stable version.
			eventually(t, 10*time.Second, "the canary back on the stable version", func() bool {
				return version(canary) == plan.After.Version
			})
			if got := stableVersion(t, base); got != plan.After.Version {
				t.Errorf("got stable version %d, want %d", got, plan.After.Version)
			}
			// What the alert SluiceRulesRolloutHalted watches.
			eventually(t, 5*time.Second, "the halted version exported", func() bool {
				mfs, _ := reg.Gather()
				for _, mf := range mfs {
					if mf.GetName() == "sluice_rulesvc_halted_version" {
						return mf.GetMetric()[0].GetGauge().GetValue() == float64(v)
					}
				}
				return false
			})
		})
	}
}

func TestShadowRulesAreReportedNotEnforced(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	mustCall(t, base, "PUT", "/admin/v1/keys/key_a", map[string]any{"plan": "free"}, 200, nil)
	mustCall(t, base, "PUT", "/admin/v1/keys/key_b", map[string]any{"plan": "free"}, 200, nil)
	var shadow struct{ After rulesvc.RuleView }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "plan", "match": map[string]any{"plan": "free"},
		"mode": "shadow", "limits": []map[string]any{{"name": "h", "rate": 1, "per": "1h"}}}, 201, &shadow)
	f := startCanaryFleet(t, base, 2)
	for _, id := range f.ids {
		waitVersion(t, shadow.After.Version, f.clients[id])
	}
	// key_a: 5 requests on each gateway, key_b: 2 on one. The shadow limit
	// allows one an hour per gateway's store, so it would refuse 4+4+1.
	send := func(id, key string, n int) {
		for range n {
			req := httptest.NewRequest("GET", "/v1/items", nil)
			req.Header.Set("X-API-Key", key)
			rec := httptest.NewRecorder()
			f.limiters[id].ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Errorf("gateway %s, %s: got status %d, want 200: shadow rules never refuse", id, key, rec.Code)
			}
		}
	}
	send(f.ids[0], "key_a", 5)
	send(f.ids[1], "key_a", 5)
	send(f.ids[0], "key_b", 2)

	var got struct{ Rules []rulesvc.ShadowRule }
	eventually(t, 10*time.Second, "the shadow report", func() bool {
		mustCall(t, base, "GET", "/admin/v1/shadow?since=1h", nil, 200, &got)
		return len(got.Rules) == 1 && got.Rules[0].WouldRefuse == 9
	})
	// Stored as the gateway's decision log writes them, not as sent.
	want := []rulesapi.KeyCount{{Key: keyhash.Of("k:key_a"), Count: 8}, {Key: keyhash.Of("k:key_b"), Count: 1}}
	if sr := got.Rules[0]; sr.Rule != shadow.After.ID || fmt.Sprint(sr.TopKeys) != fmt.Sprint(want) {
		t.Errorf("got rule %d top keys %v, want rule %d and %v", sr.Rule, sr.TopKeys, shadow.After.ID, want)
	}
}

func TestGatewayEndpointsNeedTheGatewayToken(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	report := func(versions string) string { return `{"gateway":"gw-1","versions":[` + versions + `]}` }
	tests := []struct {
		name, token, method, path, body string
		want                            int
	}{
		{"poll without a token", "", "GET", "/v1/snapshot?gateway=gw-1&wait=0s", "", 401},
		{"poll with a write token", writeToken, "GET", "/v1/snapshot?gateway=gw-1&wait=0s", "", 403},
		{"report before polling", gatewayToken, "POST", "/v1/report", report(`{"version":1,"requests":3,"refused":1}`), 409},
		{"poll with the gateway token", gatewayToken, "GET", "/v1/snapshot?gateway=gw-1&wait=0s", "", 200},
		{"poll up to date", gatewayToken, "GET", "/v1/snapshot?gateway=gw-1&after=1&wait=0s", "", 304},
		{"poll without a gateway ID", gatewayToken, "GET", "/v1/snapshot?wait=0s", "", 400},
		{"admin with the gateway token", gatewayToken, "GET", "/admin/v1/rules", "", 403},
		{"report without a token", "", "POST", "/v1/report", report(""), 401},
		{"report", gatewayToken, "POST", "/v1/report", report(`{"version":1,"requests":3,"refused":1}`), 204},
		{"report refusing more than it decided", gatewayToken, "POST", "/v1/report", report(`{"version":1,"requests":1,"refused":2}`), 400},
		{"report with an unknown field", gatewayToken, "POST", "/v1/report", `{"gateway":"gw-1","versions":[],"extra":1}`, 400},
		// Bounds on what one report may hold.
		{"report of an absurd count", gatewayToken, "POST", "/v1/report", report(`{"version":1,"requests":4611686018427387904}`), 400},
		{"report of an absurd key count", gatewayToken, "POST", "/v1/report",
			report(`{"version":1,"shadow":[{"rule":1,"would_refuse":1,"top_keys":[{"key":"k:a","count":4611686018427387904}]}]}`), 400},
		{"report of top keys beyond would_refuse", gatewayToken, "POST", "/v1/report",
			report(`{"version":1,"shadow":[{"rule":1,"would_refuse":1,"top_keys":[{"key":"k:a","count":2}]}]}`), 400},
		{"report of version 0", gatewayToken, "POST", "/v1/report", report(`{"version":0,"requests":1}`), 400},
		{"report of a key with a control character", gatewayToken, "POST", "/v1/report",
			report(`{"version":1,"shadow":[{"rule":1,"would_refuse":1,"top_keys":[{"key":"k:a\u0001","count":1}]}]}`), 400},
		{"report of too many top keys", gatewayToken, "POST", "/v1/report",
			report(`{"version":1,"shadow":[{"rule":1,"would_refuse":20,"top_keys":[` + strings.Repeat(`{"key":"k:a","count":1},`, 10) +
				`{"key":"k:b","count":1}]}]}`), 400},
		{"report larger than its bound", gatewayToken, "POST", "/v1/report",
			report(`{"version":1,"requests":1}`) + strings.Repeat(" ", rulesapi.MaxReportBytes), 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, raw := call(t, base, tt.token, tt.method, tt.path, tt.body, nil); code != tt.want {
				t.Errorf("got status %d, want %d: %s", code, tt.want, raw)
			}
		})
	}
	c := startClient(t, base, "gw-2", "eu", rulesync.Config{})
	waitVersion(t, 1, c)
}

func TestConcurrentChangesAreSerialized(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	const n = 10
	versions := make(chan int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var res struct{ Snapshot rulesvc.Published }
			code, raw := call(t, base, writeToken, "POST", "/admin/v1/rules", map[string]any{"scope": "plan",
				"match": map[string]any{"plan": fmt.Sprintf("plan%d", i)}, "limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, &res)
			if code != 201 {
				t.Errorf("create %d: got %d %s", i, code, raw)
			}
			versions <- res.Snapshot.Version
		})
	}
	wg.Wait()
	close(versions)
	seen := map[int64]bool{}
	var last int64
	for v := range versions {
		if seen[v] {
			t.Errorf("two changes got version %d", v)
		}
		seen[v] = true
		last = max(last, v)
	}
	// The last version holds every change, whatever order they ran in.
	c := startClient(t, base, "gw-1", "eu", rulesync.Config{})
	waitVersion(t, last, c)
	plans := map[string]bool{}
	for _, r := range c.Current().Document().Rules {
		plans[r.Match.Plan] = true
	}
	if len(plans) != n {
		t.Errorf("version %d: got rules of plans %v, want all %d", last, plans, n)
	}
}

// cutProxy forwards TCP connections to target until cut, which closes
// every connection and refuses new ones: a database that went away.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn // guarded by mu
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(up, c); up.Close() })
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func TestPollsAreAnsweredWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(postgresDSN())
	if err != nil {
		t.Fatalf("SLUICE_TEST_POSTGRES must be a URL here: %v", err)
	}
	proxy := startCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	schema := newSchema(t)
	r := startReplicaDSN(t, u.String(), schema, rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 7, "per": "1s"}}}, 201, &res)

	proxy.cut()
	// A gateway that starts now still gets the rules, from memory.
	c := startClient(t, base, "gw-late", "eu", rulesync.Config{})
	waitVersion(t, res.Snapshot.Version, c)
	// Changes fail, and say so.
	code, raw := call(t, base, writeToken, "POST", "/admin/v1/rules", map[string]any{"scope": "ip",
		"limits": []map[string]any{{"name": "ip", "rate": 7, "per": "1s"}}}, nil)
	if code != 500 {
		t.Errorf("change with the database down: got %d %s, want 500", code, raw)
	}
}
