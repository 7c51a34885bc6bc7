package guard_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// flaky is a remote store for fault injection: a real memstore whose
// shards (the part of a key before "/") can be made to fail or to hang
// until the caller's deadline.
type flaky struct {
	store *memstore.Store
	calls atomic.Int64

	mu   sync.Mutex
	mode map[string]string // guarded by mu; shard -> "" (up), "error" or "hang"
}

func newFlaky(now func() time.Time) *flaky {
	return &flaky{store: memstore.New(memstore.Config{Now: now}), mode: map[string]string{}}
}

func (f *flaky) set(shard, mode string) {
	f.mu.Lock()
	f.mode[shard] = mode
	f.mu.Unlock()
}

func (f *flaky) fault(ctx context.Context, key string) error {
	f.calls.Add(1)
	f.mu.Lock()
	mode := f.mode[shardOf(key)]
	f.mu.Unlock()
	switch mode {
	case "error":
		return errors.New("connection refused")
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *flaky) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	if err := f.fault(ctx, req.Key); err != nil {
		return limit.Decision{}, err
	}
	d, err := f.store.Take(ctx, req)
	d.Source = limit.FromRedis // the remote stands for Redis, and says so
	return d, err
}

func (f *flaky) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	if err := f.fault(ctx, req.Key); err != nil {
		return 0, limit.Decision{}, err
	}
	n, d, err := f.store.TakeUpTo(ctx, req, want)
	d.Source = limit.FromRedis
	return n, d, err
}

func shardOf(key string) string {
	s, _, _ := strings.Cut(key, "/")
	return s
}

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func perSecond(rate, burst int64) []limit.Limit {
	return []limit.Limit{{Name: "s", Count: rate, Period: time.Second, Burst: burst}}
}

func take(t *testing.T, s *guard.Store, req *limit.Request) limit.Decision {
	t.Helper()
	_, a, err := s.TakeUpTo(context.Background(), req, req.EffectiveCost())
	if err != nil {
		t.Fatalf("TakeUpTo(%q): %v", req.Key, err)
	}
	return a
}

func TestBreakerPerShard(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	var transitions []string
	s, err := guard.New(remote, guard.Config{
		TripAfter: 3, Pause: 2 * time.Second, Now: clk.Now, Shard: shardOf,
		OnTransition: func(shard string, from, to guard.State, _ error) {
			transitions = append(transitions, shard+":"+from.String()+"->"+to.String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := &limit.Request{Key: "a/alice", Limits: perSecond(1000, 1000)}
	good := &limit.Request{Key: "b/bob", Limits: perSecond(1000, 1000)}
	remote.set("a", "error")

	for i := range 3 {
		if a := take(t, s, bad); !a.Allowed || a.Source != limit.FromLocalFallback {
			t.Fatalf("request %d to the failing shard: got allowed %v from %s, want allowed from %s", i+1, a.Allowed, a.Source, limit.FromLocalFallback)
		}
	}
	if got := s.Breaker("a"); got != guard.Open {
		t.Fatalf("after 3 failures: breaker of shard a is %v, want open", got)
	}
	calls := remote.calls.Load()
	for range 50 {
		if a := take(t, s, bad); a.Source != limit.FromLocalFallback {
			t.Fatalf("breaker open: got answer from %s, want %s", a.Source, limit.FromLocalFallback)
		}
		if a := take(t, s, good); a.Source != limit.FromRedis {
			t.Fatalf("other shard while a is open: got answer from %s, want %s", a.Source, limit.FromRedis)
		}
	}
	if got := remote.calls.Load() - calls; got != 50 {
		t.Errorf("100 requests while shard a's breaker is open: %d remote calls, want 50 (shard b's only)", got)
	}

	clk.Advance(2 * time.Second)
	if got := s.Breaker("a"); got != guard.HalfOpen {
		t.Errorf("after the pause: breaker is %v, want half-open", got)
	}
	calls = remote.calls.Load()
	take(t, s, bad) // the probe fails
	if got := remote.calls.Load() - calls; got != 1 {
		t.Errorf("after the pause: %d remote calls, want 1 probe", got)
	}
	if got := s.Breaker("a"); got != guard.Open {
		t.Errorf("after a failed probe: breaker is %v, want open", got)
	}

	remote.set("a", "")
	clk.Advance(2 * time.Second)
	if a := take(t, s, bad); a.Source != limit.FromRedis {
		t.Errorf("probe to a recovered shard: got answer from %s, want %s", a.Source, limit.FromRedis)
	}
	if a := take(t, s, bad); a.Source != limit.FromRedis {
		t.Errorf("after a good probe: got answer from %s, want %s", a.Source, limit.FromRedis)
	}
	want := []string{"a:closed->open", "a:open->half-open", "a:half-open->open", "a:open->half-open", "a:half-open->closed"}
	if strings.Join(transitions, " ") != strings.Join(want, " ") {
		t.Errorf("got transitions %v, want %v", transitions, want)
	}
}

func TestTimeoutsOpenTheBreaker(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	reg := prometheus.NewRegistry()
	s, err := guard.New(remote, guard.Config{Timeout: 2 * time.Millisecond, Now: clk.Now, Shard: shardOf, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	remote.set("a", "hang")
	req := &limit.Request{Key: "a/alice", Limits: perSecond(100, 100)}
	for range 40 {
		if a := take(t, s, req); !a.Allowed || a.Source != limit.FromLocalFallback {
			t.Fatalf("hanging shard: got allowed %v from %s, want allowed from %s", a.Allowed, a.Source, limit.FromLocalFallback)
		}
	}
	for _, tc := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"sluice_guard_store_timeouts_total", map[string]string{"shard": "a"}, 5},
		{"sluice_guard_store_failures_total", map[string]string{"shard": "a"}, 5},
		{"sluice_guard_breaker_state", map[string]string{"shard": "a"}, float64(guard.Open)},
		{"sluice_guard_breaker_opened_total", map[string]string{"shard": "a"}, 1},
		{"sluice_guard_fallback_decisions_total", map[string]string{"source": "local-fallback", "outcome": "allowed"}, 40},
	} {
		if got := metricValue(t, reg, tc.metric, tc.labels); got != tc.want {
			t.Errorf("40 requests to a hanging shard: %s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
		}
	}
	if got := remote.calls.Load(); got != 5 {
		t.Errorf("40 requests to a hanging shard: %d calls waited on it, want 5 (then the breaker answers)", got)
	}
}

func TestFailClosed(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	s, err := guard.New(remote, guard.Config{TripAfter: 1, Pause: 2 * time.Second, Now: clk.Now, Shard: shardOf})
	if err != nil {
		t.Fatal(err)
	}
	login := limit.Limit{Name: "login", Count: 5, Period: time.Minute, FailClosed: true}
	open := limit.Limit{Name: "s", Count: 100, Period: time.Second}
	remote.set("a", "error")
	for _, tc := range []struct {
		name   string
		limits []limit.Limit
		err    bool
		index  int
		source limit.Source
	}{
		{"fail-closed limit refuses", []limit.Limit{login}, true, 0, limit.FromFailClosed},
		{"with an open limit beside it still refuses", []limit.Limit{open, login}, true, 1, limit.FromFailClosed},
		{"open limits alone are limited locally", []limit.Limit{open}, false, 0, limit.FromLocalFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, err := s.TakeUpTo(context.Background(), &limit.Request{Key: "a/alice", Limits: tc.limits}, 1)
			if got := errors.Is(err, guard.ErrUnavailable); got != tc.err {
				t.Fatalf("got error %v, want one wrapping ErrUnavailable: %v", err, tc.err)
			}
			if a.Source != tc.source || a.Index != tc.index || a.Allowed == tc.err {
				t.Errorf("got allowed %v, limit %d, from %s; want allowed %v, limit %d, from %s", a.Allowed, a.Index, a.Source, !tc.err, tc.index, tc.source)
			}
			if tc.err && (a.RetryAfter <= 0 || a.RetryAfter > 2*time.Second) {
				t.Errorf("fail-closed refusal: got retry after %v, want within the 2s pause", a.RetryAfter)
			}
		})
	}
}

// TestLocalShare checks the fallback's budget with the clock stopped: the
// gateway's share of the burst, slack / gateways, at least one token.
func TestLocalShare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gateways int
		fleet    int // what Fleet reports; -1 for no Fleet func
		slack    float64
		burst    int64
		want     int
	}{
		{"one gateway gets twice the burst", 1, -1, 0, 100, 200},
		{"four gateways get half each", 4, -1, 0, 100, 50},
		{"fleet size wins over the configured one", 4, 10, 0, 100, 20},
		{"unknown fleet size falls back to the configured one", 4, 0, 0, 100, 50},
		{"slack 1 is the even share", 4, -1, 1, 100, 25},
		{"at least one token", 1000, -1, 0, 100, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			remote := newFlaky(clk.Now)
			remote.set("a", "error")
			cfg := guard.Config{TripAfter: 1, Fleet: limit.Fleet{Gateways: tc.gateways}, Slack: tc.slack, Now: clk.Now, Shard: shardOf}
			if tc.fleet >= 0 {
				cfg.Fleet.Count = func() int { return tc.fleet }
			}
			s, err := guard.New(remote, cfg)
			if err != nil {
				t.Fatal(err)
			}
			req := &limit.Request{Key: "a/alice", Limits: perSecond(100, tc.burst)}
			got := 0
			for i := 0; i < 10_000 && take(t, s, req).Allowed; i++ {
				got++
			}
			if got != tc.want {
				t.Errorf("burst %d, %d gateways: got %d admitted locally, want %d", tc.burst, tc.gateways, got, tc.want)
			}
		})
	}
}

// TestFallbackFleetIsFixedPerOutage: the fleet count the rules service
// reports may change during an outage (3, 4, 3, ...); the local fallback
// keeps the size it started with until the shard answers again, so no
// change hands every key a fresh local bucket.
func TestFallbackFleetIsFixedPerOutage(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	var n atomic.Int64
	n.Store(3)
	s, err := guard.New(remote, guard.Config{Pause: time.Second, Now: clk.Now, Shard: shardOf, Fleet: limit.Fleet{Count: func() int { return int(n.Load()) }}})
	if err != nil {
		t.Fatal(err)
	}
	remote.set("a", "error")
	req := &limit.Request{Key: "a/alice", Limits: []limit.Limit{{Name: "m", Count: 30, Period: time.Minute}}}
	allowed := 0
	for i := range 200 {
		if i%20 == 0 {
			n.Store(3 + int64(i/20%2))
		}
		if take(t, s, req).Allowed {
			allowed++
		}
	}
	// The share at 3 gateways: 30 × 2/3 = 20 at once.
	if allowed != 20 {
		t.Errorf("fleet count flapping 3, 4 during one outage: %d of 200 allowed locally at one instant, want 20", allowed)
	}

	// Once the shard answers, the next outage reads the fleet again.
	remote.set("a", "")
	clk.Advance(time.Second)
	if a := take(t, s, req); a.Source != limit.FromRedis {
		t.Fatalf("after the pause: answer from %s, want %s", a.Source, limit.FromRedis)
	}
	n.Store(10)
	remote.set("a", "error")
	other := &limit.Request{Key: "a/bob", Limits: req.Limits}
	allowed = 0
	for range 50 {
		if take(t, s, other).Allowed {
			allowed++
		}
	}
	if allowed != 6 {
		t.Errorf("a new outage at 10 gateways: %d allowed locally, want 6 (30 × 2/10)", allowed)
	}
}

func TestCallerGivesUp(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	s, err := guard.New(remote, guard.Config{TripAfter: 1, Timeout: time.Hour, Now: clk.Now, Shard: shardOf})
	if err != nil {
		t.Fatal(err)
	}
	remote.set("a", "hang")
	ctx, cancel := context.WithCancel(context.Background())
	// Cancel once the call has reached the shard: a timer could fire before
	// the call starts on a loaded machine, and then nothing would be sent.
	t.Cleanup(cancel) // also ends the goroutine if no call ever comes
	go func() {
		for remote.calls.Load() == 0 && ctx.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		cancel()
	}()
	req := &limit.Request{Key: "a/alice", Limits: perSecond(100, 100)}
	if _, err := s.Take(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("caller cancelled: got error %v, want context.Canceled", err)
	}
	if got := s.Breaker("a"); got != guard.Closed {
		t.Errorf("after the caller cancelled: breaker is %v, want closed (the shard was not at fault)", got)
	}
	if _, err := s.Take(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("caller cancelled before the call: got error %v, want context.Canceled", err)
	}
	if got := remote.calls.Load(); got != 1 {
		t.Errorf("a call under a context already done: got %d calls to the shard, want 1 (none for it)", got)
	}
}

// TestCallerDeadlineIsATimeout: a caller's deadline shorter than the
// guard's (the gateway's --store-timeout below --redis-timeout) that passes
// while a hung shard keeps it waiting is the shard's failure, so the
// breaker opens and the local fallback limits the key, instead of every
// request passing unlimited.
func TestCallerDeadlineIsATimeout(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	s, err := guard.New(remote, guard.Config{Timeout: time.Hour, Now: clk.Now, Shard: shardOf})
	if err != nil {
		t.Fatal(err)
	}
	remote.set("a", "hang")
	req := &limit.Request{Key: "a/alice", Limits: []limit.Limit{{Name: "m", Count: 1, Period: time.Minute}}}
	allowed := 0
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		_, a, err := s.TakeUpTo(ctx, req, 1)
		cancel()
		if err != nil {
			t.Fatalf("request %d: got error %v, want a local answer", i+1, err)
		}
		if a.Source != limit.FromLocalFallback {
			t.Fatalf("request %d: got an answer from %s, want %s", i+1, a.Source, limit.FromLocalFallback)
		}
		if a.Allowed {
			allowed++
		}
	}
	if got := s.Breaker("a"); got != guard.Open {
		t.Errorf("after 20 caller deadlines on a hung shard: breaker is %v, want open", got)
	}
	if got := remote.calls.Load(); got != 5 {
		t.Errorf("got %d calls waited on the hung shard, want 5 (then the breaker answers)", got)
	}
	if allowed != 2 {
		t.Errorf("limit 1 a minute, one gateway, slack 2: got %d of 20 allowed, want 2", allowed)
	}
}

func TestNewRejects(t *testing.T) {
	remote := newFlaky(time.Now)
	for _, tc := range []struct {
		name   string
		remote limit.Granter
		cfg    guard.Config
	}{
		{"nil remote", nil, guard.Config{}},
		{"negative timeout", remote, guard.Config{Timeout: -1}},
		{"negative trip count", remote, guard.Config{TripAfter: -1}},
		{"negative pause", remote, guard.Config{Pause: -1}},
		{"negative slack", remote, guard.Config{Slack: -2}},
		{"negative fleet", remote, guard.Config{Fleet: limit.Fleet{Gateways: -3}}},
		{"down after below the timeout", remote, guard.Config{Timeout: 20 * time.Millisecond, DownAfter: 15 * time.Millisecond}},
		{"down after below the default timeout", remote, guard.Config{DownAfter: time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := guard.New(tc.remote, tc.cfg); err == nil {
				t.Error("got no error, want one")
			}
		})
	}
}

// TestDownAfterFollowsTimeout: a node is judged down after 75 ms of
// silence, or three timeouts when that is longer, so a longer timeout never
// leaves the judgement below it.
func TestDownAfterFollowsTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, downAfter, want time.Duration
	}{
		{0, 0, 75 * time.Millisecond},
		{20 * time.Millisecond, 0, 75 * time.Millisecond},
		{50 * time.Millisecond, 0, 150 * time.Millisecond},
		{100 * time.Millisecond, 0, 300 * time.Millisecond},
		{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
		{0, time.Second, time.Second},
	} {
		s, err := guard.New(newFlaky(time.Now), guard.Config{Timeout: tc.timeout, DownAfter: tc.downAfter})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Config().DownAfter; got != tc.want {
			t.Errorf("timeout %v, down after %v: got %v, want %v", tc.timeout, tc.downAfter, got, tc.want)
		}
		s.Close()
	}
}

func TestInvalidRequestIsNotAFailure(t *testing.T) {
	remote := newFlaky(time.Now)
	s, err := guard.New(remote, guard.Config{TripAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(context.Background(), &limit.Request{Key: "k"}); err == nil {
		t.Error("request with no limits: got no error, want one")
	}
	if got := s.Breaker(""); got != guard.Closed {
		t.Errorf("after an invalid request: breaker is %v, want closed", got)
	}
}

// metricValue returns the value of the metric name with labels, or fails.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n := 0
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
					n++
				}
			}
			if n == len(labels) {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// TestRefreshMovesKeys plays a failover: the key's node fails, its breaker
// opens, and the refresher, called because it opened, learns that another
// node serves the key now, so the next request goes there under a closed
// breaker, without waiting for the pause.
func TestRefreshMovesKeys(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := newFlaky(clk.Now)
	var (
		mu    sync.Mutex
		owner = "a"
	)
	refreshed := make(chan struct{}, 100)
	before := runtime.NumGoroutine()
	s, err := guard.New(remote, guard.Config{
		TripAfter: 2, Now: clk.Now, RefreshEvery: time.Millisecond,
		Shard: func(string) string { mu.Lock(); defer mu.Unlock(); return owner },
		Refresh: func(context.Context) error {
			mu.Lock()
			owner = "b" // the replica was promoted
			mu.Unlock()
			select {
			case refreshed <- struct{}{}:
			default:
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	remote.set("k", "error") // every call fails until the key moves
	req := &limit.Request{Key: "k/alice", Limits: perSecond(100, 100)}
	take(t, s, req)
	take(t, s, req)
	if got := s.Breaker("a"); got != guard.Open {
		t.Fatalf("after 2 failures: breaker of a is %v, want open", got)
	}
	<-refreshed
	remote.set("k", "")
	if a := take(t, s, req); a.Source != limit.FromRedis {
		t.Errorf("after the refresh: got answer from %s, want %s (the key's new node)", a.Source, limit.FromRedis)
	}
	// The breaker of a stays open, so the refresher keeps going until it
	// is closed; Close stops it.
	<-refreshed
	s.Close()
	s.Close()
	if after := settledGoroutines(before); after > before {
		t.Errorf("goroutines: %d before New, %d after Close", before, after)
	}
}

// settledGoroutines returns the goroutine count once it is at most want,
// or what it is after a second: a goroutine that signalled its end may
// take a moment to be gone.
func settledGoroutines(want int) int {
	deadline := time.Now().Add(time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}
