package limittest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Factory returns an empty store that reads time from now. Keys the suite
// uses are unique to each test, so a store shared between calls is fine.
type Factory func(t *testing.T, now func() time.Time) limit.Store

// start is where every suite clock begins: a whole second, so window
// boundaries fall on round numbers.
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Run runs the conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	t.Run("BurstThenRefuse", func(t *testing.T) { testBurstThenRefuse(t, newStore) })
	t.Run("Refill", func(t *testing.T) { testRefill(t, newStore) })
	t.Run("AllOrNothing", func(t *testing.T) { testAllOrNothing(t, newStore) })
	t.Run("Cost", func(t *testing.T) { testCost(t, newStore) })
	t.Run("KeysIsolated", func(t *testing.T) { testKeysIsolated(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore) })
	t.Run("MatchesModel", func(t *testing.T) { testMatchesModel(t, newStore) })
	t.Run("Windows", func(t *testing.T) { testWindows(t, newStore) })
	t.Run("MixedAllOrNothing", func(t *testing.T) { testMixedAllOrNothing(t, newStore) })
	t.Run("ConcurrentAlgorithms", func(t *testing.T) { testConcurrentAlgorithms(t, newStore) })
	t.Run("MatchesModelMixed", func(t *testing.T) { testMatchesModelMixed(t, newStore) })
	t.Run("RateChange", func(t *testing.T) { testRateChange(t, newStore) })
	t.Run("Shadow", func(t *testing.T) { testShadow(t, newStore) })
	t.Run("MatchesModelShadow", func(t *testing.T) { testMatchesModelShadow(t, newStore) })
	t.Run("Results", func(t *testing.T) { testResults(t, newStore) })
}

// uniqueKey returns a key no other test uses, so stores may be shared.
func uniqueKey(t *testing.T, suffix string) string {
	return fmt.Sprintf("%s/%d/%s", t.Name(), rand.Uint64(), suffix)
}

func take(t *testing.T, s limit.Store, req *limit.Request) limit.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take(%q): %v", req.Key, err)
	}
	if d.Source == "" {
		t.Fatalf("Take(%q) = %+v: the decision does not say where it came from", req.Key, d)
	}
	// The model knows no sources; the rest of the decision must match it.
	d.Source = ""
	return d
}

func perSecond(name string, rate, burst int64) limit.Limit {
	return limit.Limit{Name: name, Count: rate, Period: time.Second, Burst: burst}
}

func testBurstThenRefuse(t *testing.T, newStore Factory) {
	// GCRA is the token bucket kept as one timestamp: the same answers.
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			clk := NewClock(start)
			s := newStore(t, clk.Now)
			l := perSecond("s", 10, 20)
			l.Algorithm = alg
			req := &limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{l}}
			for i := range 20 {
				d := take(t, s, req)
				if !d.Allowed {
					t.Fatalf("request %d of a burst of 20: refused, want allowed", i+1)
				}
				if want := int64(19 - i); d.Remaining != want {
					t.Errorf("request %d: remaining %d, want %d", i+1, d.Remaining, want)
				}
			}
			d := take(t, s, req)
			if d.Allowed {
				t.Fatal("request 21 of a burst of 20: allowed, want refused")
			}
			if d.RetryAfter != 100*time.Millisecond {
				t.Errorf("retry after %v, want 100ms (one token at 10/s)", d.RetryAfter)
			}
			if d.ResetAfter != 2*time.Second {
				t.Errorf("reset after %v, want 2s (20 tokens at 10/s)", d.ResetAfter)
			}
		})
	}
}

func testRefill(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	req := &limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{perSecond("s", 10, 10)}}
	for range 10 {
		take(t, s, req)
	}
	if take(t, s, req).Allowed {
		t.Fatal("empty bucket allowed a request")
	}
	clk.Advance(99 * time.Millisecond)
	if d := take(t, s, req); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("after 99ms: allowed %v retry %v, want refused with 1ms to wait", d.Allowed, d.RetryAfter)
	}
	clk.Advance(time.Millisecond)
	if !take(t, s, req).Allowed {
		t.Fatal("after 100ms at 10/s: refused, want one token")
	}
	clk.Advance(550 * time.Millisecond)
	got := 0
	for take(t, s, req).Allowed {
		got++
	}
	if got != 5 {
		t.Errorf("after 550ms at 10/s: %d allowed, want 5", got)
	}
	clk.Advance(time.Hour)
	got = 0
	for take(t, s, req).Allowed {
		got++
	}
	if got != 10 {
		t.Errorf("after an idle hour: %d allowed, want the burst of 10", got)
	}
}

func testAllOrNothing(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	key := uniqueKey(t, "k")
	both := &limit.Request{Key: key, Limits: []limit.Limit{perSecond("s", 5, 5), {Name: "m", Count: 100, Period: time.Minute}}}
	for range 5 {
		if !take(t, s, both).Allowed {
			t.Fatal("within both limits: refused")
		}
	}
	for range 10 {
		d := take(t, s, both)
		if d.Allowed {
			t.Fatal("per-second limit empty: allowed")
		}
		if d.Index != 0 {
			t.Errorf("refused by limit %d, want 0 (the per-second one)", d.Index)
		}
	}
	minute := &limit.Request{Key: key, Limits: []limit.Limit{{Name: "m", Count: 100, Period: time.Minute}}}
	if d := take(t, s, minute); d.Remaining != 94 {
		t.Errorf("minute limit after 5 allowed and 10 refused: remaining %d, want 94 (refusals take nothing)", d.Remaining)
	}
}

func testCost(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	req := &limit.Request{Key: uniqueKey(t, "k"), Cost: 5, Limits: []limit.Limit{perSecond("s", 10, 12)}}
	for i, want := range []bool{true, true, false} {
		if d := take(t, s, req); d.Allowed != want {
			t.Fatalf("cost-5 request %d on a burst of 12: allowed %v, want %v", i+1, d.Allowed, want)
		}
	}
	if d := take(t, s, req); d.RetryAfter != 300*time.Millisecond {
		t.Errorf("2 tokens left, cost 5 at 10/s: retry after %v, want 300ms", d.RetryAfter)
	}
	req.Cost = 13
	if d := take(t, s, req); d.Allowed || d.RetryAfter != limit.Never {
		t.Errorf("cost 13 on a burst of 12: allowed %v retry %v, want refused with Never", d.Allowed, d.RetryAfter)
	}
	// Every algorithm refuses a cost above its capacity for good, and takes
	// costs up to it whole.
	for _, alg := range limit.Algorithms {
		l := limit.Limit{Name: "c", Count: 12, Period: time.Minute, Algorithm: alg}
		req := &limit.Request{Key: uniqueKey(t, string(alg)), Cost: 13, Limits: []limit.Limit{l}}
		if d := take(t, s, req); d.Allowed || d.RetryAfter != limit.Never || d.Remaining != 12 {
			t.Errorf("%s: cost 13 on a capacity of 12: allowed %v retry %v remaining %d, want refused, Never, 12 left", alg, d.Allowed, d.RetryAfter, d.Remaining)
		}
		req.Cost = 12
		if d := take(t, s, req); !d.Allowed || d.Remaining != 0 {
			t.Errorf("%s: cost 12 on a capacity of 12: allowed %v remaining %d, want allowed with 0 left", alg, d.Allowed, d.Remaining)
		}
	}
}

// hostileKeys are API keys a client might send to escape its limit or to
// spend someone else's: they must all be distinct buckets.
var hostileKeys = []string{
	"a", "a}", "{a}", "a:s", "a:s:token_bucket:1000", "}{", "{", "}", "", " ", "a b",
	"\x00", "\xff\xfe", "k\n", "ключ", "{user1000}.following", "user1000",
	string(make([]byte, 4096)),
}

func testKeysIsolated(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	prefix := uniqueKey(t, "")
	for _, k := range hostileKeys {
		req := &limit.Request{Key: prefix + k, Limits: []limit.Limit{perSecond("s", 1, 2)}}
		take(t, s, req)
	}
	for _, k := range hostileKeys {
		req := &limit.Request{Key: prefix + k, Limits: []limit.Limit{perSecond("s", 1, 2)}}
		if d := take(t, s, req); !d.Allowed || d.Remaining != 0 {
			t.Errorf("key %q: second request allowed %v remaining %d, want allowed with 0 left (another key spent its tokens?)", k, d.Allowed, d.Remaining)
		}
	}
}

func testConcurrent(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	req := limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{perSecond("s", 1, 50), {Name: "m", Count: 1000, Period: time.Minute}}}
	if got := admitConcurrently(t, s, req, 16, 20); got != 50 {
		t.Errorf("320 concurrent requests on a burst of 50 with the clock stopped: %d admitted, want exactly 50", got)
	}
}

// admitConcurrently sends req from goroutines goroutines, each times times,
// and reports how many were admitted.
func admitConcurrently(t *testing.T, s limit.Store, req limit.Request, goroutines, times int) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			r := req
			for range times {
				d, err := s.Take(context.Background(), &r)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// testMatchesModel drives a random sequence through the store and through
// limit.Evaluate on plain memory, and requires the same decision at every step.
func testMatchesModel(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	rng := rand.New(rand.NewPCG(1, 2))
	key := uniqueKey(t, "k")
	limits := []limit.Limit{
		{Name: "s", Count: 7, Period: time.Second, Burst: 11},
		{Name: "m", Count: 50, Period: time.Minute},
		{Name: "t", Count: 3, Period: 250 * time.Millisecond, Burst: 4},
	}
	m := NewModel()
	for step := range 400 {
		clk.Advance(time.Duration(rng.IntN(200)) * time.Millisecond)
		req := &limit.Request{Key: key, Cost: int64(1 + rng.IntN(3)), Limits: limits[:1+rng.IntN(len(limits))]}
		want := m.Take(clk.Now().UnixMilli(), req)
		got := take(t, s, req)
		if got != want {
			t.Fatalf("step %d (cost %d, %d limits): store %+v, model %+v", step, req.Cost, len(req.Limits), got, want)
		}
	}
}

// Model is the reference store for one key: limit.Evaluate over a map of
// states, kept forever, no cleverness. Stores are compared against it
// decision by decision. It is not safe for concurrent use.
type Model struct{ states map[string]limit.State }

// NewModel returns a Model that has seen no request.
func NewModel() *Model { return &Model{states: map[string]limit.State{}} }

// Take answers req at now (Unix ms) as a store must, and keeps the new
// states when it is allowed: the enforced limits' when they all allow it,
// the shadow limits' (limit.Limit.Shadow) when they all do, each group
// apart. Unlike a store it never drops a state, so it stays right when a
// clock steps back past a state's expiry. req.Key is ignored: a Model
// holds one key.
func (m *Model) Take(now int64, req *limit.Request) limit.Decision {
	outs := make([]limit.Outcome, len(req.Limits))
	for i := range req.Limits {
		st := m.states[req.Limits[i].BucketID()]
		outs[i] = limit.Evaluate(&req.Limits[i], &st, now, req.EffectiveCost())
	}
	d := limit.DecideEach(outs, req.Limits, req.EffectiveCost())
	for i := range req.Limits {
		if l := &req.Limits[i]; l.Shadow && d.Shadow.Allowed || !l.Shadow && d.Allowed {
			m.states[l.BucketID()] = outs[i].Next
		}
	}
	return d
}

// testShadow checks shadow limits (limit.Limit.Shadow) beside enforced
// ones in one request: they never refuse, their verdict comes back in
// Decision.Shadow, they count on buckets of their own even under an
// enforced limit's name, and they take the cost whenever they all allow
// it, whatever the enforced limits answered.
func testShadow(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	key := uniqueKey(t, "k")
	enforced := perSecond("s", 1, 3) // three, then one a second
	tight := perSecond("s", 1, 1)    // the same name, tried out at one
	tight.Shadow = true
	other := limit.Limit{Name: "m", Count: 2, Period: time.Minute, Shadow: true}
	req := &limit.Request{Key: key, Limits: []limit.Limit{enforced, tight, other}}
	type want struct {
		allowed          bool
		remaining        int64
		shadowAllowed    bool
		shadowIndex      int
		shadowRemaining  int64
		shadowRetryAfter time.Duration
	}
	for i, w := range []want{
		{true, 2, true, 1, 0, 0},             // both shadow limits take
		{true, 1, false, 1, 0, time.Second},  // s (shadow) would refuse; m takes nothing either
		{true, 0, false, 1, 0, time.Second},  // s (shadow) again; s (enforced) is empty now
		{false, 0, false, 1, 0, time.Second}, // refused by s, and s (shadow) would have too
	} {
		d := take(t, s, req)
		got := want{d.Allowed, d.Remaining, d.Shadow.Allowed, d.Shadow.Index, d.Shadow.Remaining, d.Shadow.RetryAfter}
		if got != w || !d.Shadow.Checked || d.Index != 0 {
			t.Fatalf("request %d: got %+v (index %d, checked %v), want %+v (index 0, checked)", i+1, got, d.Index, d.Shadow.Checked, w)
		}
	}
	// A second later the shadow bucket holds one token again and takes it
	// although the enforced limit refuses: a shadow bucket counts the
	// traffic that arrives, not the traffic let through.
	clk.Advance(time.Second)
	if d := take(t, s, req); !d.Allowed || !d.Shadow.Allowed {
		t.Fatalf("a second later: got %+v, want allowed and shadow allowed", d)
	}
	d := take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{enforced}})
	if d.Allowed || d.Shadow.Checked {
		t.Fatalf("the enforced limit alone, emptied: got %+v, want refused with no shadow verdict", d)
	}
	d = take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{other}})
	if !d.Allowed || d.Index != -1 || !d.Shadow.Checked || d.Shadow.Allowed || d.Shadow.Index != 0 {
		t.Fatalf("the shadow limit m alone, used twice: got %+v, want allowed, index -1, shadow refused at index 0", d)
	}
	// A cost no shadow limit can ever hold: still allowed by the enforced
	// limit, shadow Never.
	clk.Advance(time.Hour)
	d = take(t, s, &limit.Request{Key: key, Cost: 2, Limits: []limit.Limit{enforced, tight}})
	if !d.Allowed || d.Shadow.Allowed || d.Shadow.RetryAfter != limit.Never {
		t.Fatalf("cost 2 over a shadow burst of 1: got %+v, want allowed, shadow refused for ever", d)
	}
	// A fail-closed shadow limit does not make the request fail closed.
	fc := tight
	fc.FailClosed = true
	if i := (&limit.Request{Limits: []limit.Limit{enforced, fc}}).FailClosed(); i != -1 {
		t.Errorf("FailClosed of a request whose only fail-closed limit is shadow: got %d, want -1", i)
	}
}

// testMatchesModelShadow is testMatchesModelMixed with shadow limits:
// random limits, some tried out in shadow under an enforced one's name,
// random subsets of them per request, compared with Model at every step.
func testMatchesModelShadow(t *testing.T, newStore Factory) {
	periods := []time.Duration{10 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var limits []limit.Limit
		for i := range 2 + rng.IntN(2) {
			l := limit.Limit{Name: fmt.Sprint("l", i), Count: 1 + rng.Int64N(12), Period: periods[rng.IntN(len(periods))],
				Burst: rng.Int64N(15), Algorithm: limit.Algorithms[(int(seed)+i)%len(limit.Algorithms)]}
			limits = append(limits, l)
			if rng.IntN(3) > 0 {
				sh := l
				sh.Shadow, sh.Count, sh.Burst = true, 1+rng.Int64N(6), rng.Int64N(8)
				sh.Algorithm = limit.Algorithms[(int(seed)+i+1+rng.IntN(4))%len(limit.Algorithms)]
				limits = append(limits, sh)
			}
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { matchModel(t, newStore, rng, limits, 200, 10) })
	}
}
