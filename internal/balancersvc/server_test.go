package balancersvc_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/balancersvc"
	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/internal/sharesync"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/share"
)

// region is one region of a test: its share layer over its own store, and
// the client that keeps the layer in step with the balancer.
type region struct {
	store *share.Store
}

func startRegion(t *testing.T, ctx context.Context, wg *sync.WaitGroup, url, name, token string) *region {
	t.Helper()
	st, err := share.New(memstore.New(memstore.Config{}), share.Config{Regions: 2})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sharesync.New(sharesync.Config{URLs: []string{url}, Region: name, Gateway: name + "-1", Store: st, Token: token,
		Interval: 50 * time.Millisecond, Wait: 200 * time.Millisecond, Backoff: longpoll.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { c.Run(ctx) })
	return &region{store: st}
}

// harness is a balancer served over HTTP, with the context and wait group
// of the goroutines a test starts (Run, clients); the test's cleanup
// stops them.
type harness struct {
	srv *balancersvc.Server
	url string
	reg *prometheus.Registry
	ctx context.Context
	wg  *sync.WaitGroup
}

// serve starts a balancer of cfg over HTTP, with polls held at most
// 200 ms and its metrics in h.reg; Run is not started.
func serve(t *testing.T, cfg balancersvc.Config) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), wg: &sync.WaitGroup{}}
	cfg.Registerer, cfg.MaxWait = h.reg, cmp.Or(cfg.MaxWait, 200*time.Millisecond)
	srv, err := balancersvc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); h.wg.Wait(); hs.Close() })
	h.srv, h.url, h.ctx = srv, hs.URL, ctx
	return h
}

// run starts the balancer's Run.
func (h *harness) run() { h.wg.Go(func() { h.srv.Run(h.ctx) }) }

// hammer asks st for key under a limit of 1000 a second every
// millisecond, until the returned function is called.
func hammer(ctx context.Context, st *share.Store, key string) (stop func()) {
	l := limit.Limit{Name: "s", Count: 1000, Period: time.Second}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			st.Take(ctx, &limit.Request{Key: key, Limits: []limit.Limit{l}})
		}
	})
	return func() { close(done); wg.Wait() }
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func getKey(t *testing.T, url, key string) (int, balancer.KeyShares) {
	t.Helper()
	resp, err := http.Get(url + balancer.KeyPath + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ks balancer.KeyShares
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&ks); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, ks
}

// TestServerAndClients runs a balancer over HTTP with two regions whose
// clients report real traffic through their share layers, and follows a
// key's share from an even split to where its traffic is.
func TestServerAndClients(t *testing.T) {
	h := serve(t, balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us", "eu"}}, TrustedNetwork: true, Interval: 50 * time.Millisecond})
	if code, _ := getKey(t, h.url, "k:a"); code != http.StatusServiceUnavailable {
		t.Errorf("before the first rebalance: got %d, want 503", code)
	}
	h.run()
	ctx, reg, hs := h.ctx, h.reg, struct{ URL string }{h.url}
	us := startRegion(t, ctx, h.wg, hs.URL, "us", "")
	eu := startRegion(t, ctx, h.wg, hs.URL, "eu", "")

	if got := us.store.Share("k:a", "s"); got != share.Whole/2 {
		t.Errorf("before any table: got share %d, want an even half", got)
	}
	stop := hammer(ctx, us.store, "k:a")
	waitFor(t, "us to hold 95% of k:a", func() bool { return us.store.Share("k:a", "s") == 950_000 })
	waitFor(t, "eu to hold the 5% minimum", func() bool { return eu.store.Share("k:a", "s") == 50_000 })
	stop()
	code, ks := getKey(t, hs.URL, "k:a")
	if code != http.StatusOK || !ks.Balanced || ks.Limits["s"]["us"].Share+ks.Limits["s"]["eu"].Share > share.Whole {
		t.Errorf("got %d %+v, want k:a balanced within the whole", code, ks)
	}
	if ks.Limits["s"]["us"].Demand <= 0 || ks.Limits["s"]["eu"].Demand != 0 {
		t.Errorf("got demand us %v eu %v, want us's only", ks.Limits["s"]["us"].Demand, ks.Limits["s"]["eu"].Demand)
	}
	// With no traffic left the key is no longer balanced.
	waitFor(t, "k:a back to the default", func() bool { _, ks := getKey(t, hs.URL, "k:a"); return !ks.Balanced })
	// Polls answered 304 keep the shares fresh.
	if age := us.store.Age(); age > time.Second {
		t.Errorf("got share age %v, want fresh", age)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"sluice_balancer_rebalance_duration_seconds", "sluice_balancer_keys_balanced", "sluice_balancer_region_up", "sluice_balancer_region_share_ratio"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
}

func TestServerRefuses(t *testing.T) {
	srv, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us"}}, TrustedNetwork: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for _, u := range []string{"/v1/shares?region=mars", "/v1/shares?region=us&after=x", "/v1/shares?region=us&wait=-1s"} {
		resp, err := http.Get(hs.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: got %d, want 400", u, resp.StatusCode)
		}
	}
	resp, err := http.Post(hs.URL+balancer.ReportPath, "application/json", stringsReader(`{"region":"us","gateway":"g","span_ms":0}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("report with no span: got %d, want 400", resp.StatusCode)
	}
	big := `{"region":"us","gateway":"` + strings.Repeat("g", balancer.MaxReportBytes) + `","span_ms":1}`
	resp, err = http.Post(hs.URL+balancer.ReportPath, "application/json", stringsReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("report of %d bytes: got %d, want 413", len(big), resp.StatusCode)
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// TestStandbyTakesOver runs a primary and a standby: the standby answers
// 503 while the primary answers, takes over once the primary has been gone
// for DownAfter, and the gateways' client, given both, follows it.
func TestStandbyTakesOver(t *testing.T) {
	cfg := balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us", "eu"}}, TrustedNetwork: true, Interval: 50 * time.Millisecond, MaxWait: 200 * time.Millisecond}
	primary, err := balancersvc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(primary.Handler())
	defer ps.Close()
	cfg.Primary = ps.URL
	standby, err := balancersvc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ss := httptest.NewServer(standby.Handler())
	defer ss.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	pctx, stopPrimary := context.WithCancel(ctx)
	wg.Go(func() { primary.Run(pctx) })
	wg.Go(func() { standby.Run(ctx) })
	st, err := share.New(memstore.New(memstore.Config{}), share.Config{Regions: 2})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sharesync.New(sharesync.Config{URLs: []string{ps.URL, ss.URL}, Region: "us", Gateway: "us-1", Store: st,
		Interval: 50 * time.Millisecond, Wait: 200 * time.Millisecond, Backoff: longpoll.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { c.Run(ctx) })
	waitFor(t, "a table from the primary", func() bool { return st.Current() != nil })
	time.Sleep(200 * time.Millisecond) // several standby checks
	if code, _ := getKey(t, ss.URL, "k:a"); code != http.StatusServiceUnavailable {
		t.Errorf("standby while the primary answers: got %d, want 503", code)
	}
	first := st.Current().Version
	stopPrimary()
	ps.CloseClientConnections()
	ps.Close()
	waitFor(t, "a table from the standby", func() bool { return st.Current().Version != first })
	if code, ks := getKey(t, ss.URL, "k:a"); code != http.StatusOK || !ks.Up["us"] || ks.Up["eu"] {
		t.Errorf("standby after takeover: got %d %+v, want us up and eu down", code, ks)
	}
}

// TestToken checks that with a token the balancer refuses reports, polls
// and key look-ups (which name raw API keys) without it, that it refuses to
// start with no token unless told the network is trusted, and that a
// client that has the token gets its shares.
func TestToken(t *testing.T) {
	if _, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us"}}}); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("New without a token or TrustedNetwork: got error %v, want one saying there is no token", err)
	}
	srv, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us"}}, Interval: 50 * time.Millisecond, MaxWait: 200 * time.Millisecond, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for _, u := range []string{"/v1/shares?region=us", balancer.KeyPath + "k:key_8f3"} {
		resp, err := http.Get(hs.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: got %d, want 401", u, resp.StatusCode)
		}
	}
	resp, err := http.Post(hs.URL+balancer.ReportPath, "application/json", stringsReader(`{"region":"us","gateway":"g","span_ms":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("report without the token: got %d, want 401", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { srv.Run(ctx) })
	st, err := share.New(memstore.New(memstore.Config{}), share.Config{Regions: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sharesync.New(sharesync.Config{URLs: []string{hs.URL}, Region: "us", Gateway: "us-1", Store: st, Token: "s3cret",
		Interval: 50 * time.Millisecond, Wait: 200 * time.Millisecond, Backoff: longpoll.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { c.Run(ctx) })
	waitFor(t, "shares with the token", func() bool { return st.Current() != nil })
}
