package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// counted is the shared store of the unit tests: a real memstore that
// counts the calls made to it, standing for Redis.
type counted struct {
	*memstore.Store
	calls atomic.Int64
}

func (c *counted) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	c.calls.Add(1)
	d, err := c.Store.Take(ctx, req)
	d.Source = limit.FromRedis // it stands for Redis, and says so
	return d, err
}

func (c *counted) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	c.calls.Add(1)
	n, d, err := c.Store.TakeUpTo(ctx, req, want)
	d.Source = limit.FromRedis
	return n, d, err
}

// fleet is n lease stores, as n gateways, sharing one counted store.
type fleet struct {
	shared *counted
	stores []*Store
}

func newFleet(t *testing.T, n int, now func() time.Time) *fleet {
	t.Helper()
	f := &fleet{shared: &counted{Store: memstore.New(memstore.Config{Now: now})}}
	for range n {
		g, err := guard.New(f.shared, guard.Config{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(g, Config{Fleet: limit.Fleet{Gateways: n}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		f.stores = append(f.stores, s)
	}
	return f
}

// settle waits for every background refill, so that a test driven by a
// fake clock sees the same sequence every run.
func (f *fleet) settle() {
	for _, s := range f.stores {
		s.wg.Wait()
	}
}

func (f *fleet) decide(t *testing.T, i int, req *limit.Request) limit.Decision {
	t.Helper()
	a, err := f.stores[i%len(f.stores)].Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take(%q): %v", req.Key, err)
	}
	f.settle()
	return a
}

func bucket(rate, burst int64) limit.Limit {
	return limit.Limit{Name: "s", Count: rate, Period: time.Second, Burst: burst}
}

func TestBatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limits   []limit.Limit
		gateways int
		want     int64
	}{
		{"busy tenant on 300 gateways", []limit.Limit{bucket(100_000, 0)}, 300, 33},
		{"ordinary key on 300 gateways is checked per request", []limit.Limit{bucket(100, 0)}, 300, 1},
		{"one gateway takes 100 ms of the rate", []limit.Limit{bucket(1000, 0)}, 1, 100},
		{"never more than the burst", []limit.Limit{bucket(1000, 40)}, 1, 40},
		{"tightest limit decides", []limit.Limit{bucket(1000, 0), {Name: "m", Count: 6000, Period: time.Minute}}, 1, 10},
		{"gcra leases too", []limit.Limit{{Name: "s", Count: 1000, Period: time.Second, Algorithm: limit.GCRA}}, 2, 50},
		{"window limits are not leased", []limit.Limit{bucket(1000, 0), {Name: "h", Count: 1e6, Period: time.Hour, Algorithm: limit.FixedWindow}}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(stub{}, Config{Fleet: limit.Fleet{Gateways: tc.gateways}})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.batch(&limit.Request{Key: "k", Limits: tc.limits}); got != tc.want {
				t.Errorf("got batch %d, want %d", got, tc.want)
			}
		})
	}
}

// TestNeverOver runs 4 gateways round-robin far above a key's limit, on a
// fake clock, and checks the fleet's admissions after every request against
// what the bucket allows: burst + rate × elapsed.
func TestNeverOver(t *testing.T) {
	clk := limittest.NewClock(start)
	f := newFleet(t, 4, clk.Now)
	req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{bucket(2000, 100)}}
	admitted := int64(0)
	for i := range 20_000 {
		if i%10 == 0 {
			clk.Advance(time.Millisecond) // 10,000 requests a second: 5x the limit
		}
		if f.decide(t, i, req).Allowed {
			admitted++
		}
		elapsed := clk.Now().Sub(start)
		if bound := 100 + int64(2000*elapsed.Seconds()); admitted > bound {
			t.Fatalf("after %d requests in %v: %d admitted, want at most %d (burst + rate × elapsed)", i+1, elapsed, admitted, bound)
		}
	}
	// Under, never over; by how much is what leases cost.
	bound := 100 + 2000*clk.Now().Sub(start).Seconds()
	t.Logf("admitted %d of a possible %.0f (%.1f%%)", admitted, bound, 100*float64(admitted)/bound)
	if float64(admitted) < 0.9*bound {
		t.Errorf("admitted %d, want at least 90%% of the %.0f the bucket allows: leases should cost a few percent", admitted, bound)
	}
}

// TestInstantBound pins what "never over" does not cover: at one instant a
// fleet can admit the bucket's burst plus the tokens its gateways already
// hold in leases, taken from the bucket before it refilled. The held
// tokens are below 1.5 batches per gateway (a refill of one batch is asked
// for once fewer than half a batch are left), so the bound is burst +
// 1.5 × rate × lookahead across the fleet. A change that lets gateways hold
// more fails here.
func TestInstantBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gateways int
		rate     int64 // a second; the burst is the same
	}{
		{"one gateway", 1, 100},
		{"three gateways", 3, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			f := newFleet(t, tc.gateways, clk.Now)
			req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{bucket(tc.rate, tc.rate)}}
			batch := f.stores[0].batch(req)
			// Demand builds and batches are leased: 60% of the burst.
			for i := range int(tc.rate * 6 / 10) {
				f.decide(t, i, req)
			}
			// The bucket refills fully within the leases' lifetime.
			clk.Advance(990 * time.Millisecond)
			held := int64(0)
			for i, s := range f.stores {
				h := s.held(req)
				if limit := 3 * batch / 2; h > limit {
					t.Errorf("gateway %d holds %d leased tokens, want at most 1.5 batches of %d: %d", i, h, batch, limit)
				}
				held += h
			}
			admitted := int64(0)
			for i := range int(2 * tc.rate) {
				if f.decide(t, i, req).Allowed {
					admitted++
				}
			}
			t.Logf("burst %d, %d held in leases: %d admitted at one instant", tc.rate, held, admitted)
			if bound := tc.rate + held; admitted > bound {
				t.Errorf("at one instant: %d admitted, want at most %d (burst %d + %d held in leases)", admitted, bound, tc.rate, held)
			}
			if admitted < tc.rate {
				t.Errorf("at one instant: %d admitted, want at least the burst %d", admitted, tc.rate)
			}
		})
	}
}

// TestCallsPerRequest measures the shared store's calls for a busy key
// within its limit, with leases and with batches of one.
func TestCallsPerRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lookahead time.Duration
		most      float64 // calls per request
	}{
		{"per-request check", time.Millisecond, 1},
		{"leases", 0, 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			shared := &counted{Store: memstore.New(memstore.Config{Now: clk.Now})}
			var stores []*Store
			for range 3 {
				g, err := guard.New(shared, guard.Config{Now: clk.Now})
				if err != nil {
					t.Fatal(err)
				}
				s, err := New(g, Config{Fleet: limit.Fleet{Gateways: 3}, Now: clk.Now, Lookahead: tc.lookahead})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				stores = append(stores, s)
			}
			req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{bucket(3000, 3000)}}
			const n = 9000 // 3 s at 3,000 a second, the limit
			for i := range n {
				if i%3 == 0 {
					clk.Advance(time.Millisecond)
				}
				s := stores[i%3]
				if _, err := s.Take(context.Background(), req); err != nil {
					t.Fatal(err)
				}
				s.wg.Wait()
			}
			got := float64(shared.calls.Load()) / n
			t.Logf("%s: %d shared-store calls for %d requests: %.3f per request", tc.name, shared.calls.Load(), n, got)
			if got > tc.most {
				t.Errorf("got %.3f shared-store calls per request, want at most %.3f", got, tc.most)
			}
		})
	}
}

func TestRefusalCache(t *testing.T) {
	clk := limittest.NewClock(start)
	f := newFleet(t, 1, clk.Now)
	req := &limit.Request{Key: "k:runaway", Limits: []limit.Limit{bucket(10, 1)}}
	if a := f.decide(t, 0, req); !a.Allowed || a.Source != limit.FromRedis {
		t.Fatalf("first request: got allowed %v from %s, want allowed from %s", a.Allowed, a.Source, limit.FromRedis)
	}
	a := f.decide(t, 0, req)
	if a.Allowed || a.Source != limit.FromRedis || a.RetryAfter != 100*time.Millisecond {
		t.Fatalf("second request: got allowed %v from %s retry %v, want refused from %s, retry 100ms", a.Allowed, a.Source, a.RetryAfter, limit.FromRedis)
	}
	calls := f.shared.calls.Load()
	for _, tc := range []struct {
		after   time.Duration
		allowed bool
		source  limit.Source
		retry   time.Duration
	}{
		{0, false, limit.FromRefusalCache, 100 * time.Millisecond},
		{40 * time.Millisecond, false, limit.FromRefusalCache, 60 * time.Millisecond},
		{59 * time.Millisecond, false, limit.FromRefusalCache, time.Millisecond},
		{time.Millisecond, true, limit.FromRedis, 0},
		{0, false, limit.FromRedis, 100 * time.Millisecond},
	} {
		clk.Advance(tc.after)
		a := f.decide(t, 0, req)
		if a.Allowed != tc.allowed || a.Source != tc.source || a.RetryAfter != tc.retry {
			t.Errorf("at +%v: got allowed %v from %s retry %v, want allowed %v from %s retry %v",
				clk.Now().Sub(start), a.Allowed, a.Source, a.RetryAfter, tc.allowed, tc.source, tc.retry)
		}
	}
	if got := f.shared.calls.Load() - calls; got != 2 {
		t.Errorf("5 requests, 3 within the retry time: %d shared-store calls, want 2", got)
	}
	cheaper := &limit.Request{Key: "k:runaway", Cost: 1, Limits: req.Limits}
	if a := f.decide(t, 0, cheaper); a.Source != limit.FromRefusalCache {
		t.Errorf("same key and limits: got answer from %s, want %s", a.Source, limit.FromRefusalCache)
	}
	other := &limit.Request{Key: "k:runaway", Limits: []limit.Limit{{Name: "t", Count: 1000, Period: time.Second}}}
	if a := f.decide(t, 0, other); !a.Allowed || a.Source != limit.FromRedis {
		t.Errorf("same key, other limits: got allowed %v from %s, want allowed from %s", a.Allowed, a.Source, limit.FromRedis)
	}
}

// TestLeaseExpires checks that unspent tokens are dropped after the TTL and
// that a lowered limit is never served from the old lease.
func TestLeaseExpires(t *testing.T) {
	clk := limittest.NewClock(start)
	f := newFleet(t, 1, clk.Now)
	req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{bucket(1000, 1000)}}
	for range 5 { // demand of 5 in this window: the next miss leases 5
		f.decide(t, 0, req)
	}
	clk.Advance(100 * time.Millisecond)
	for range 20 {
		f.decide(t, 0, req)
	}
	s := f.stores[0]
	if got := s.held(req); got == 0 {
		t.Fatalf("busy key: holds %d leased tokens, want some", got)
	}
	lowered := &limit.Request{Key: "k:busy", Limits: []limit.Limit{bucket(1, 1)}}
	if a := f.decide(t, 0, lowered); a.Source == limit.FromLease {
		t.Errorf("lowered limit: got answer from %s, want a fresh check", a.Source)
	}
	clk.Advance(time.Second)
	calls := f.shared.calls.Load()
	if a := f.decide(t, 0, req); a.Source != limit.FromRedis {
		t.Errorf("after the lease's second: got answer from %s, want %s (expired tokens are dropped)", a.Source, limit.FromRedis)
	}
	if got := f.shared.calls.Load() - calls; got != 1 {
		t.Errorf("after expiry: %d shared-store calls, want 1", got)
	}
}

// TestQuietKeyIsExact checks that a key far below its limit is checked on
// every request, one token at a time, however high the limit.
func TestQuietKeyIsExact(t *testing.T) {
	clk := limittest.NewClock(start)
	f := newFleet(t, 1, clk.Now)
	req := &limit.Request{Key: "k:quiet", Limits: []limit.Limit{bucket(100_000, 0)}}
	for i := range 20 {
		clk.Advance(150 * time.Millisecond)
		a := f.decide(t, 0, req)
		if a.Source != limit.FromRedis || a.Remaining != 100_000-1 {
			t.Fatalf("request %d of a quiet key: got remaining %d from %s, want %d from %s", i+1, a.Remaining, a.Source, 100_000-1, limit.FromRedis)
		}
	}
}

// TestQuietKeysHoldNoEntry: keys seen once a second each are checked
// exactly, one shared-store call a request, and hold no lease entry; a
// refusal of a quiet key is still remembered.
func TestQuietKeysHoldNoEntry(t *testing.T) {
	clk := limittest.NewClock(start)
	f := newFleet(t, 1, clk.Now)
	const keys = 1000
	calls := f.shared.calls.Load()
	for i := range 3 * keys { // 3 s, a key every ms
		clk.Advance(time.Millisecond)
		req := &limit.Request{Key: fmt.Sprint("k:", i%keys), Limits: []limit.Limit{bucket(10, 10)}}
		if a := f.decide(t, 0, req); !a.Allowed || a.Source != limit.FromRedis || a.Remaining != 9 {
			t.Fatalf("request %d: got allowed %v from %s, remaining %d, want allowed from %s, remaining 9", i, a.Allowed, a.Source, a.Remaining, limit.FromRedis)
		}
	}
	if got := f.shared.calls.Load() - calls; got != 3*keys {
		t.Errorf("%d requests of quiet keys: %d shared-store calls, want one each", 3*keys, got)
	}
	// Keys that share a demand slot within a window look busy together,
	// and get an entry: a few of 1,000 at 100 keys a window.
	if got := f.stores[0].Len(); got > keys/20 {
		t.Errorf("%d keys seen once a second: %d lease entries, want at most %d (keys sharing a demand slot)", keys, got, keys/20)
	}

	// One request every 150 ms, under a limit of one a minute: the second
	// is refused by the shared store, and from then on by memory.
	req := &limit.Request{Key: "k:slow-runaway", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Minute}}}
	want := []limit.Source{limit.FromRedis, limit.FromRedis, limit.FromRefusalCache, limit.FromRefusalCache}
	calls = f.shared.calls.Load()
	for i, src := range want {
		clk.Advance(150 * time.Millisecond)
		if a := f.decide(t, 0, req); a.Allowed != (i == 0) || a.Source != src {
			t.Errorf("request %d of a quiet key over its limit: got allowed %v from %s, want allowed %v from %s", i+1, a.Allowed, a.Source, i == 0, src)
		}
	}
	if got := f.shared.calls.Load() - calls; got != 2 {
		t.Errorf("4 requests, 2 within a remembered refusal: %d shared-store calls, want 2", got)
	}
}

func TestIdleEntriesEvicted(t *testing.T) {
	clk := limittest.NewClock(start)
	f := newFleet(t, 1, clk.Now)
	// Keys busy enough for an entry: two requests within a window.
	busy := func(key string) {
		for range 2 {
			f.decide(t, 0, &limit.Request{Key: key, Limits: []limit.Limit{bucket(10, 10)}})
		}
	}
	for i := range 1000 {
		busy(fmt.Sprint("k:", i))
	}
	if got := f.stores[0].Len(); got < 900 {
		t.Fatalf("1000 keys just used: %d entries, want them kept", got)
	}
	clk.Advance(6 * time.Second)
	for i := range 1000 {
		busy(fmt.Sprint("k:new-", i))
	}
	if got := f.stores[0].Len(); got > 1100 {
		t.Errorf("1000 keys idle for 6 s, then 1000 new ones: %d entries, want about 1000 (the idle ones evicted)", got)
	}
}

// TestCloseStopsRefills checks that Close ends a refill waiting on the
// store and leaves no goroutine behind.
func TestCloseStopsRefills(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 5 {
		hang := &hanging{started: make(chan struct{}, 10)}
		s, err := New(hang, Config{Lookahead: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		req := &limit.Request{Key: "k", Limits: []limit.Limit{bucket(100, 100)}}
		for range 60 {
			if _, err := s.Take(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
		<-hang.started
		if got := hang.refills.Load(); got != 1 {
			t.Fatalf("got %d refills in flight, want 1 (one per key)", got)
		}
		s.Close()
		if got := hang.refills.Load(); got != 0 {
			t.Errorf("after Close: %d refills in flight, want 0", got)
		}
		s.Close()
	}
	// A goroutine that signalled its end may take a moment to be gone.
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	if after > before {
		t.Errorf("goroutines: %d before 5 stores with refills in flight, %d after closing them", before, after)
	}
}

func TestErrorsPass(t *testing.T) {
	boom := errors.New("boom")
	s, err := New(failing{boom}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Take(context.Background(), &limit.Request{Key: "k", Limits: []limit.Limit{bucket(1, 1)}}); !errors.Is(err, boom) {
		t.Errorf("got error %v, want the inner store's", err)
	}
	if _, err := s.Take(context.Background(), &limit.Request{Key: "k"}); err == nil {
		t.Error("request with no limits: got no error, want one")
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner limit.Granter
		cfg   Config
	}{
		{"nil inner", nil, Config{}},
		{"negative gateways", stub{}, Config{Fleet: limit.Fleet{Gateways: -1}}},
		{"negative ttl", stub{}, Config{TTL: -time.Second}},
		{"sub-millisecond lookahead", stub{}, Config{Lookahead: time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.inner, tc.cfg); err == nil {
				t.Error("got no error, want one")
			}
		})
	}
}

// held reports the leased tokens a store holds for req.
func (s *Store) held(req *limit.Request) int64 {
	var buf [128]byte
	id := appendID(buf[:0], req)
	sh := s.shards.Of(req.Key)
	sh.Lock()
	e := sh.M[string(id)]
	sh.Unlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.b.tokens
}

// stub is a shared store that allows every request at once, granting
// its cost and no more, doing nothing.
type stub struct{}

func (stub) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{Allowed: true, Source: limit.FromRedis}, nil
}

func (stub) TakeUpTo(_ context.Context, req *limit.Request, _ int64) (int64, limit.Decision, error) {
	return req.EffectiveCost(), limit.Decision{Allowed: true, Source: limit.FromRedis}, nil
}

type failing struct{ err error }

func (f failing) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{}, f.err
}

func (f failing) TakeUpTo(context.Context, *limit.Request, int64) (int64, limit.Decision, error) {
	return 0, limit.Decision{}, f.err
}

// hanging grants what a request asks for at once and holds every
// background refill (the calls with a cancellable context) until its
// context ends.
type hanging struct {
	refills atomic.Int64
	started chan struct{}
}

func (h *hanging) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	_, d, err := h.TakeUpTo(ctx, req, req.EffectiveCost())
	return d, err
}

func (h *hanging) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	if ctx.Done() == nil {
		return want, limit.Decision{Allowed: true, Source: limit.FromRedis}, nil
	}
	h.refills.Add(1)
	h.started <- struct{}{}
	<-ctx.Done()
	h.refills.Add(-1)
	return 0, limit.Decision{}, ctx.Err()
}
