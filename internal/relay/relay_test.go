package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/relay"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

const token = "relay-test-token-0123456789"

// relayProc is a relay served on loopback: its own stack over Redis
// (pipeline.New with the relays as the fleet) behind relay.Server, as
// sluice relay runs it.
type relayProc struct {
	t    *testing.T
	addr string
	p    *pipeline.Pipeline
	srv  *http.Server
	done chan struct{}
}

func startRelay(t *testing.T, redisAddr, addr string, relays int) *relayProc {
	t.Helper()
	p, err := pipeline.New(context.Background(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{redisAddr}},
		Fleet: limit.Fleet{Gateways: relays}, Lease: lease.Config{WaitForRefill: true}, Guard: calm})
	if err != nil {
		t.Fatal(err)
	}
	s, err := relay.NewServer(relay.ServerConfig{Store: p.Lease(), Held: p.Lease().Held, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	// A relay restarted on its address may find it still closing.
	for i := 0; ; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &relayProc{t: t, addr: ln.Addr().String(), p: p, srv: &http.Server{Handler: s}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.srv.Serve(ln)
	}()
	t.Cleanup(r.kill)
	return r
}

// kill stops the relay at once, connections in flight included, as a
// crash would, and drops what it held.
func (r *relayProc) kill() {
	r.srv.Close()
	<-r.done
	r.p.Close()
}

func (r *relayProc) url() string { return "http://" + r.addr }

// newGateway returns a gateway's decision stack leasing through urls,
// its metrics in reg (nil: none).
func newGateway(t *testing.T, redisAddr string, gateways int, reg prometheus.Registerer, urls ...string) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(context.Background(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{redisAddr}}, Registerer: reg,
		Fleet: limit.Fleet{Gateways: gateways}, Relay: pipeline.Relay{URLs: urls, Token: token, Retry: 100 * time.Millisecond}, Guard: calm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// calm is the guard of the relays and gateways here: Redis never fails in
// these tests, so a redis-server starved on a loaded machine must not be
// judged down (75 ms of silence by default) and the key answered from a
// local share, which may admit over the bound the tests check.
var calm = guard.Config{Timeout: time.Second, DownAfter: 3 * time.Second}

// hot is the busy key's limit: 2,000 a second, bursts of 200.
var hot = limit.Limit{Name: "s", Count: 2000, Period: time.Second, Burst: 200}

// load sends requests for key from workers goroutines spread over gws
// until stop is closed, counting admitted requests and errors.
func load(gws []*pipeline.Pipeline, key string, workers int, stop <-chan struct{}) (wait func() (admitted, failed int64, errs []error)) {
	var admitted, failed atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			req := &limit.Request{Key: key, Limits: []limit.Limit{hot}}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d, err := gws[(w+i)%len(gws)].Take(context.Background(), req)
				switch {
				case err != nil:
					failed.Add(1)
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err)
					}
					mu.Unlock()
				case d.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	return func() (int64, int64, []error) {
		wg.Wait()
		return admitted.Load(), failed.Load(), errs
	}
}

// checkLoad waits for a load begun at start and checks that no request
// failed and that the key admitted no more than its bound; it returns
// the requests admitted.
func checkLoad(t *testing.T, wait func() (int64, int64, []error), start time.Time) int64 {
	t.Helper()
	admitted, failed, errs := wait()
	elapsed := time.Since(start)
	if failed > 0 {
		t.Errorf("%d requests failed, want none: %v", failed, errs)
	}
	if max := bound(elapsed); admitted > max {
		t.Errorf("admitted %d in %v, over the bound of %d (burst %d + %d/s)", admitted, elapsed, max, hot.Burst, hot.Count)
	}
	return admitted
}

// bound is the most a fresh bucket of hot admits over elapsed.
func bound(elapsed time.Duration) int64 {
	return hot.Burst + int64(float64(hot.Count)*elapsed.Seconds()) + 1
}

func TestTwoRelaysNeverOverOnAHotKey(t *testing.T) {
	srv := redistest.Standalone(t)
	a := startRelay(t, srv.Addr(), "127.0.0.1:0", 2)
	b := startRelay(t, srv.Addr(), "127.0.0.1:0", 2)
	var gws []*pipeline.Pipeline
	for i := range 8 {
		urls := []string{a.url(), b.url()}
		if i%2 == 1 {
			urls = []string{b.url(), a.url()}
		}
		gws = append(gws, newGateway(t, srv.Addr(), 8, nil, urls...))
	}
	stop := make(chan struct{})
	start := time.Now()
	wait := load(gws, "k:hot-two-relays", 32, stop)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	admitted := checkLoad(t, wait, start)
	// Redis calls: far fewer than requests, the point of the relays.
	if n, _ := a.p.Lease().Held(); n == 0 {
		if m, _ := b.p.Lease().Held(); m == 0 {
			t.Error("neither relay holds a lease on the hot key")
		}
	}
	t.Logf("admitted %d in %v", admitted, time.Since(start))
}

// TestRelayKilledUnderLoad kills the relay of half the gateways while
// they are busy: they go to Redis directly with no failed request and no
// excess, and back to the relay once it is served again.
func TestRelayKilledUnderLoad(t *testing.T) {
	srv := redistest.Standalone(t)
	a := startRelay(t, srv.Addr(), "127.0.0.1:0", 2)
	b := startRelay(t, srv.Addr(), "127.0.0.1:0", 2)
	var gws []*pipeline.Pipeline
	regA := prometheus.NewRegistry() // gw0's: one of relay a's gateways
	for i := range 6 {
		u, reg := a.url(), prometheus.Registerer(nil)
		if i%2 == 1 {
			u = b.url()
		}
		if i == 0 {
			reg = regA
		}
		gws = append(gws, newGateway(t, srv.Addr(), 6, reg, u))
	}
	via := func(how string) float64 {
		return counterValue(t, regA, "sluice_relay_client_takes_total", "via", how)
	}
	held := func(r *relayProc) int64 { _, n := r.p.Lease().Held(); return n }
	stop := make(chan struct{})
	start := time.Now()
	wait := load(gws, "k:hot-killed", 24, stop)
	time.Sleep(500 * time.Millisecond)
	beforeKill := via("direct")
	a.kill()
	time.Sleep(700 * time.Millisecond)
	if got := via("direct") - beforeKill; got == 0 {
		t.Error("relay a's gateway made no call to Redis directly while a was down")
	}
	relayBefore := via("relay")
	restarted := startRelay(t, srv.Addr(), a.addr, 2)
	// Back within the client's retry (100ms); give it several.
	deadline := time.Now().Add(5 * time.Second)
	// took is whether the restarted relay was seen holding a lease: read
	// again after the loop, a lease spent meanwhile would read as none.
	took := false
	for !took && time.Now().Before(deadline) {
		if took = held(restarted) > 0; !took {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for via("relay") == relayBefore && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if via("relay") == relayBefore {
		t.Error("relay a's gateway did not lease through it again once it was back")
	}
	close(stop)
	checkLoad(t, wait, start)
	if !took {
		t.Error("the restarted relay leased nothing: its gateways did not come back to it")
	}
}

func TestServerRefuses(t *testing.T) {
	srv := redistest.Standalone(t)
	r := startRelay(t, srv.Addr(), "127.0.0.1:0", 1)
	for _, tc := range []struct {
		name, auth, body string
		want             int
	}{
		{"no token", "", `{"takes":[]}`, http.StatusUnauthorized},
		{"wrong token", "Bearer nope-nope-nope-nope", `{"takes":[]}`, http.StatusUnauthorized},
		{"not json", "Bearer " + token, `{`, http.StatusBadRequest},
		{"invalid limit", "Bearer " + token, `{"takes":[{"key":"k","limits":[{"name":"s","count":0,"period_ms":1000}]}]}`, http.StatusBadRequest},
		{"too many takes", "Bearer " + token, manyTakes(relay.MaxTakes + 1), http.StatusBadRequest},
		{"fine", "bearer " + token, manyTakes(2), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, r.url()+relay.LeasePath, stringsReader(tc.body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestNewServerNeedsAToken(t *testing.T) {
	_, err := relay.NewServer(relay.ServerConfig{Store: nil})
	if err == nil {
		t.Fatal("got no error for a server with no store")
	}
	_, err = relay.NewClient(relay.ClientConfig{URLs: []string{"ftp://x"}})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("got %v for a client with a bad URL and no direct store, want an error", err)
	}
}

func manyTakes(n int) string {
	s := `{"takes":[`
	for i := range n {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf(`{"key":"k:%d","limits":[{"name":"s","count":10,"period_ms":1000}]}`, i)
	}
	return s + "]}"
}

// counterValue returns the counter name{label=value} gathered from reg,
// zero if it is not there.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	v, _ := series(t, reg, name, label, value)
	return v
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestRefusalsCountThroughRelay sends a client that ignores 429, through a
// gateway whose takes go to a relay, every 10 ms for 2 s against a limit
// of 10 a second, bursts of 10: with refusals that count, it gets its burst
// and at most the token or two refilled before its first refusal, and no
// more; the same client on a limit whose refusals are free passes at the
// limit's rate, about 20 more.
func TestRefusalsCountThroughRelay(t *testing.T) {
	srv := redistest.Standalone(t)
	r := startRelay(t, srv.Addr(), "127.0.0.1:0", 1)
	gw := newGateway(t, srv.Addr(), 1, nil, r.url())
	for _, count := range []bool{true, false} {
		l := limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 10, CountRefusals: count}
		req := &limit.Request{Key: fmt.Sprintf("k:ignores-429-%v", count), Limits: []limit.Limit{l}}
		allowed := 0
		for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(10 * time.Millisecond) {
			d, err := gw.Take(t.Context(), req)
			if err != nil {
				t.Fatalf("count %v: %v", count, err)
			}
			if d.Allowed {
				allowed++
			}
		}
		switch {
		case count && allowed > 13:
			t.Errorf("refusals that count: %d allowed in 2 s, want the burst of 10 and at most 3 refilled before the first refusal", allowed)
		case !count && allowed < 25:
			t.Errorf("free refusals: %d allowed in 2 s, want 10 + about 20", allowed)
		}
		t.Logf("count %v: %d allowed", count, allowed)
	}
}
