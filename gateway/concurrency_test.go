package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/inflight"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

const concRules = `
keys:
  key_c: {plan: pro}
rules:
  - scope: plan
    match: {plan: pro}
    concurrency: 2
    limits: [{name: s, rate: 1000, per: 1s}]
`

// slotLife is the request timeout of the tests' slots: how long a killed
// gateway's slot lasts.
const slotLife = 3 * time.Second

func concPipeline(t *testing.T, addrs ...string) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: addrs},
		Fleet: limit.Fleet{Gateways: 3}, Guard: guard.Config{Timeout: time.Second}, Inflight: inflight.Config{Timeout: slotLife}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// inFlight reads the key's slot set in Redis, on the node srv gives.
func inFlight(t *testing.T, srv func() *redistest.Server, p *pipeline.Pipeline) int64 {
	t.Helper()
	v, err := srv().Do(t.Context(), "ZCARD", p.Redis().SlotsKey("k:key_c"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := v.(int64)
	return n
}

// eventually polls cond until it holds or 10 s pass: a bound for a loaded
// machine, not a speed requirement.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 10 s", what)
}

// TestConcurrencySlots runs three gateways over one Redis, standalone and a
// 3-primary cluster, with a limit of 2 in flight per key: a third request
// is refused as a concurrency limit at any gateway, and the slots come
// back when responses end in success, upstream error, client disconnect
// and panic.
func TestConcurrencySlots(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Standalone(t)
		testConcurrencySlots(t, []string{s.Addr()}, func() *redistest.Server { return s })
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		testConcurrencySlots(t, c.Addrs(), func() *redistest.Server {
			n, err := c.NodeForKey(t.Context(), "sluice:{k:key_c}:c")
			if err != nil {
				t.Fatal(err)
			}
			return n
		})
	})
}

func testConcurrencySlots(t *testing.T, addrs []string, srv func() *redistest.Server) {
	set, err := rules.Parse("conc.yaml", []byte(concRules))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/error":
			http.Error(w, "upstream failed", http.StatusBadGateway)
		case "/panic":
			panic("upstream handler bug")
		case "/wait-client":
			<-r.Context().Done()
		}
	})
	var pipes []*pipeline.Pipeline
	var urls []string
	for range 3 {
		p := concPipeline(t, addrs...)
		l, err := gateway.New(gateway.Config{Store: p, Rules: gateway.StaticRules(set)})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewUnstartedServer(l.Middleware(upstream))
		hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's trace
		hs.Start()
		t.Cleanup(hs.Close)
		pipes, urls = append(pipes, p), append(urls, hs.URL)
	}
	get := func(ctx context.Context, gw int, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", urls[gw]+path, nil)
		req.Header.Set("X-API-Key", "key_c")
		return http.DefaultClient.Do(req)
	}

	// Two held through gateways 0 and 1; the third, at gateway 2, refused.
	done := make(chan int, 2)
	for gw := range 2 {
		go func() {
			resp, err := get(context.Background(), gw, "/hold")
			if err != nil {
				done <- -1
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	eventually(t, "two slots taken", func() bool { return inFlight(t, srv, pipes[0]) == 2 })
	resp, err := get(t.Context(), 2, "/hold")
	if err != nil {
		t.Fatal(err)
	}
	var prob gateway.Problem
	json.NewDecoder(resp.Body).Decode(&prob)
	resp.Body.Close()
	if resp.StatusCode != 429 || prob.Type != gateway.ConcurrencyExceeded || !strings.Contains(prob.Detail, "concurrency limit") ||
		resp.Header.Get("X-Concurrency-Limit") != "2" || resp.Header.Get("X-Concurrency-In-Flight") != "2" {
		t.Errorf("third request: got %d %+v, headers %v; want 429 naming the concurrency limit", resp.StatusCode, prob, resp.Header)
	}
	close(release)
	for range 2 {
		if code := <-done; code != 200 {
			t.Errorf("held request: got %d, want 200", code)
		}
	}
	if n := inFlight(t, srv, pipes[0]); n != 0 {
		t.Errorf("after success: %d slots in flight, want 0", n)
	}

	for _, tt := range []struct {
		path string
		want int
	}{{"/error", 502}, {"/panic", -1}} {
		resp, err := get(t.Context(), 1, tt.path)
		if err == nil {
			if resp.StatusCode != tt.want {
				t.Errorf("%s: got %d, want %d", tt.path, resp.StatusCode, tt.want)
			}
			resp.Body.Close()
		}
		eventually(t, tt.path+" released", func() bool { return inFlight(t, srv, pipes[0]) == 0 })
	}

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		resp, err := get(ctx, 0, "/wait-client")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	eventually(t, "slot of the waiting client", func() bool { return inFlight(t, srv, pipes[0]) == 1 })
	cancel()
	<-errc
	eventually(t, "client disconnect released", func() bool { return inFlight(t, srv, pipes[0]) == 0 })
}

// TestConcurrencyKilledGateway kills a gateway process (this test binary,
// run again) holding both slots of a key mid-request: the key is refused
// until the slots' life, the request timeout, ends, and then admitted.
func TestConcurrencyKilledGateway(t *testing.T) {
	if addr := os.Getenv("SLUICE_TEST_HOLD_SLOTS"); addr != "" {
		holdSlots(t, addr)
		return
	}
	srv := redistest.Standalone(t)
	started := time.Now() // the helper takes its slots after this
	cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrencyKilledGateway$")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_HOLD_SLOTS="+srv.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()

	p := concPipeline(t, srv.Addr())
	slot, d := p.Slots().Acquire(t.Context(), "k:key_c", 2, false)
	if time.Since(killed) < slotLife && d.Allowed {
		t.Fatalf("right after the kill: a third slot was taken (%+v), want the dead gateway's two still held", d)
	}
	slot.Release()
	eventually(t, "dead gateway's slots freed", func() bool {
		s, d := p.Slots().Acquire(t.Context(), "k:key_c", 2, false)
		s.Release()
		return d.Allowed
	})
	if since := time.Since(started); since < slotLife {
		t.Errorf("slots freed %v after the helper started, before their life of %v", since, slotLife)
	}
}

// holdSlots is the killed gateway: it takes both slots, says so, and waits.
func holdSlots(t *testing.T, addr string) {
	p := concPipeline(t, addr)
	for range 2 {
		if _, d := p.Slots().Acquire(context.Background(), "k:key_c", 2, false); !d.Allowed {
			t.Fatalf("helper: slot refused: %+v", d)
		}
	}
	os.Stdout.WriteString("held\n")
	select {}
}

// TestConcurrencySlotsReleasedOnCallbackPanic runs a key with an enforced
// concurrency limit and a shadow one of 1 in flight whose second request
// would be refused, at which the embedder's OnDecision panics: the
// request fails, and the slots it had taken are released all the same,
// so the key is not left holding them until they time out.
func TestConcurrencySlotsReleasedOnCallbackPanic(t *testing.T) {
	srv := redistest.Standalone(t)
	set, err := rules.Parse("conc.yaml", []byte(`
keys:
  key_c: {plan: pro}
rules:
  - scope: plan
    match: {plan: pro}
    concurrency: 2
    limits: [{name: s, rate: 1000, per: 1s}]
  - scope: plan
    match: {plan: pro}
    mode: shadow
    concurrency: 1
    limits: [{name: s, rate: 1000, per: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := concPipeline(t, srv.Addr())
	l, err := gateway.New(gateway.Config{Store: p, Rules: gateway.StaticRules(set), OnDecision: func(e gateway.Event) {
		if e.Shadow && !e.Decision.Allowed {
			panic("embedder's callback bug")
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	hs := httptest.NewUnstartedServer(l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})))
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's trace
	hs.Start()
	t.Cleanup(hs.Close)
	get := func(ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		req.Header.Set("X-API-Key", "key_c")
		return http.DefaultClient.Do(req)
	}
	held := make(chan struct{})
	go func() {
		defer close(held)
		if resp, err := get(context.Background(), "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the first request's slot taken", func() bool { return inFlight(t, func() *redistest.Server { return srv }, p) == 1 })
	// The second: the shadow limit would refuse it and the callback panics.
	if resp, err := get(t.Context(), "/x"); err == nil {
		resp.Body.Close()
	}
	eventually(t, "the panicking request's slot released", func() bool { return inFlight(t, func() *redistest.Server { return srv }, p) == 1 })
	close(release)
	<-held
	eventually(t, "every slot released", func() bool { return inFlight(t, func() *redistest.Server { return srv }, p) == 0 })
}
