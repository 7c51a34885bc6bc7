package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// owedSent adds up the owed refusals (limit.Request.Refused) a shared
// store is sent.
type owedSent struct {
	limit.Granter
	n int64
}

func (o *owedSent) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	o.n += req.Refused
	return o.Granter.Take(ctx, req)
}

func (o *owedSent) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	o.n += req.Refused
	return o.Granter.TakeUpTo(ctx, req, want)
}

// newOwedStore returns a lease store over memstore on clk, and the wrapper
// that counts the owed refusals it sends.
func newOwedStore(t *testing.T, clk *limittest.Clock) (*Store, *owedSent) {
	t.Helper()
	o := &owedSent{Granter: memstore.New(memstore.Config{Now: clk.Now})}
	s, err := New(o, Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, o
}

// TestRefillRefusalIsFree runs, for 10 s of a test clock, a client that
// sends a request every 100 µs and, when refused, waits the Retry-After it
// is given, through a lease store, on a limit of 1000 a second (burst
// 1000): it must be allowed as often when the limit's refusals count as
// when they are free, since it never sends a request it was told to hold
// back (the refusals it gets are each one request, charged either way only
// under counting; a few tokens' difference). Background refills are
// refused whenever the bucket is empty, with no client refused: charging
// them as refusals kept this client at 7995 passes against 10900.
func TestRefillRefusalIsFree(t *testing.T) {
	run := func(count bool) (allowed int) {
		clk := limittest.NewClock(start)
		s, _ := newOwedStore(t, clk)
		l := bucket(1000, 1000)
		l.CountRefusals = count
		req := &limit.Request{Key: "k:patient", Limits: []limit.Limit{l}}
		for end := start.Add(10 * time.Second); clk.Now().Before(end); {
			d, err := s.Take(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			s.wg.Wait() // the refill answers before the clock moves on
			if d.Allowed {
				allowed++
				clk.Advance(100 * time.Microsecond)
			} else {
				clk.Advance(max(d.RetryAfter, time.Millisecond))
			}
		}
		return allowed
	}
	free, count := run(false), run(true)
	t.Logf("allowed in 10 s through leases: %d with free refusals, %d with refusals that count", free, count)
	if count < free*98/100 {
		t.Errorf("a client that waits its Retry-After is allowed %d times when refusals count, %d when they are free", count, free)
	}
}

// hammerThenPause sends a client that ignores 429 every 10 ms for 1.6 s
// on a limit of 1 a second with a burst of 10, whose refusals count (it
// takes 10 s to fill), then pauses 6 s, longer than the lease entries'
// Idle (5 s) and shorter than the fill time, while another key of the same
// shard sweeps it when sweep is set. It reports whether the client's next
// request is allowed and the owed refusals that request's call carried.
func hammerThenPause(t *testing.T, leased, sweep bool) (allowed bool, owed int64) {
	clk := limittest.NewClock(start)
	var st limit.Store = memstore.New(memstore.Config{Now: clk.Now})
	var s *Store
	var o *owedSent
	if leased {
		s, o = newOwedStore(t, clk)
		st = s
	}
	l := limit.Limit{Name: "s", Count: 1, Period: time.Second, Burst: 10, CountRefusals: true}
	req := &limit.Request{Key: "k:hammer", Limits: []limit.Limit{l}}
	for range 160 {
		if _, err := st.Take(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Millisecond)
	}
	clk.Advance(6 * time.Second)
	if s != nil && sweep {
		h := s.shards.Hash(req.Key)
		for i := 0; ; i++ {
			k := fmt.Sprintf("k:other%d", i)
			if s.shards.At(s.shards.Hash(k)) != s.shards.At(h) {
				continue
			}
			other := &limit.Request{Key: k, Limits: []limit.Limit{l}}
			for range 3 {
				if _, err := st.Take(t.Context(), other); err != nil {
					t.Fatal(err)
				}
			}
			break
		}
	}
	var before int64
	if o != nil {
		before = o.n
	}
	d, err := st.Take(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if o != nil {
		owed = o.n - before
	}
	return d.Allowed, owed
}

// TestOwedOutlivesIdle checks that the refusals a key owes survive a sweep
// of idle entries for as long as the limit takes to fill: a client that
// hammered a limit that fills in 10 s, then paused 6 s, is refused on its
// return, as it is straight against the shared store, because its next
// call carries what it owes.
func TestOwedOutlivesIdle(t *testing.T) {
	directAllowed, _ := hammerThenPause(t, false, false)
	if directAllowed {
		t.Fatal("the store alone allows the client after its pause: the test shows nothing")
	}
	for _, sweep := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweep=%v", sweep), func(t *testing.T) {
			allowed, owed := hammerThenPause(t, true, sweep)
			if allowed {
				t.Errorf("allowed after a 6 s pause through leases (owed refusals sent: %d); the store alone refuses", owed)
			}
			if owed == 0 {
				t.Error("the call after the pause carried no owed refusals")
			}
		})
	}
}

// TestInvalidCountNoPanic sends requests whose limit has a Count of 0,
// which limit.Request.Validate refuses, straight to a lease store, as an
// embedder skipping validation might: they must be refused by the inner
// store with an error, not panic in the lease layer.
func TestInvalidCountNoPanic(t *testing.T) {
	clk := limittest.NewClock(start)
	s, _ := newOwedStore(t, clk)
	for _, l := range []limit.Limit{
		{Name: "zero", Count: 0, Period: time.Second, CountRefusals: true},
		{Name: "zero-burst", Count: 0, Period: time.Second, Burst: 5, CountRefusals: true},
	} {
		t.Run(l.Name, func(t *testing.T) {
			req := &limit.Request{Key: "k:" + l.Name, Limits: []limit.Limit{l}}
			for range 3 {
				if _, err := s.Take(t.Context(), req); err == nil {
					t.Error("a limit of Count 0 was not refused with an error")
				}
			}
		})
	}
}

// TestRefusedMissOwesFullCost checks that a request the shared store
// refuses, after the lease set aside its few leftover tokens for it, owes
// the rest of its cost: the store charged the call's cost, the request's
// cost less the tokens set aside (which go back to the lease), and under
// refusals that count the whole cost is charged.
func TestRefusedMissOwesFullCost(t *testing.T) {
	tests := []struct {
		name     string
		fill     int64 // ms; 0: refusals are free
		wantOwed int64
	}{
		{"count", 10_000, 2},
		{"free", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			s, _ := newOwedStore(t, clk)
			now := clk.Now().UnixMilli()
			l := bucket(10, 10)
			l.CountRefusals = tt.fill > 0
			req := &limit.Request{Key: "k", Limits: []limit.Limit{l}, Cost: 5}
			e := &entry{}
			m := &miss{cost: 5, upTo: 5, fill: tt.fill, reserved: 2, reservedUntil: now + 1000, need: 3, want: 3}
			a := &answer{d: limit.Decision{RetryAfter: time.Second, Source: limit.FromMemory}, at: now}
			if d, err := s.settle(e, req, m, a); err != nil || d.Allowed {
				t.Fatalf("settle = %+v, %v; want a refusal", d, err)
			}
			if e.b.owed != tt.wantOwed {
				t.Errorf("owed after the refusal = %d, want %d", e.b.owed, tt.wantOwed)
			}
			if e.b.tokens != 2 {
				t.Errorf("leased tokens after the refusal = %d, want the 2 set aside back", e.b.tokens)
			}
		})
	}
}

// TestRefillChargesExactlyOwed runs one background refill carrying 5
// owed refusals, on a limit whose refusals count, with the bucket full
// and with it empty: the shared store charges a refused call's cost (1)
// on top of what it is sent, so the refill sends 4 and, refused, owes
// nothing more, while allowed (its cost not charged as a refusal) it
// leaves 1 owed for the key's next call.
func TestRefillChargesExactlyOwed(t *testing.T) {
	tests := []struct {
		name      string
		empty     bool
		wantOwed  int64 // left in the book
		wantTaken bool  // tokens leased
	}{
		{"allowed", false, 1, true},
		{"refused", true, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			s, o := newOwedStore(t, clk)
			l := bucket(100, 100)
			l.CountRefusals = true
			req := &limit.Request{Key: "k", Limits: []limit.Limit{l}}
			if tt.empty {
				if _, _, err := o.TakeUpTo(t.Context(), req, 100); err != nil {
					t.Fatal(err)
				}
				o.n = 0
			}
			e := &entry{fill: fillMs(req)}
			e.b.fetching = true
			s.refill(e, req, 10, nil, 5)
			s.wg.Wait()
			e.mu.Lock()
			defer e.mu.Unlock()
			if o.n != 4 {
				t.Errorf("owed refusals sent with the refill = %d, want 4 (5 less its own cost)", o.n)
			}
			if e.b.owed != tt.wantOwed {
				t.Errorf("owed after the refill = %d, want %d", e.b.owed, tt.wantOwed)
			}
			if got := e.b.tokens > 0; got != tt.wantTaken {
				t.Errorf("tokens leased = %d, want some: %v", e.b.tokens, tt.wantTaken)
			}
		})
	}
}

// TestSweepSparesEntryJustFound checks that a sweep by another key of the
// same shard does not drop an entry a request has just been handed and
// not yet used: its book's last use is still from before the key's idle
// spell, and what the request then books in it (refusals it owes among
// them) would go to an entry no longer in the map, lost.
func TestSweepSparesEntryJustFound(t *testing.T) {
	clk := limittest.NewClock(start)
	s, _ := newOwedStore(t, clk)
	reqA := &limit.Request{Key: "k:a", Limits: []limit.Limit{bucket(10, 10)}}
	hA := s.shards.Hash(reqA.Key)
	slA := &s.demand[hA%demandSlots]
	now := func() int64 { return clk.Now().UnixMilli() }
	s.entry(reqA, hA, slA, now(), 2, 0)

	// Another key in A's shard.
	var reqB *limit.Request
	for i := 0; reqB == nil; i++ {
		r := &limit.Request{Key: fmt.Sprint("k:b", i), Limits: reqA.Limits}
		if s.shards.At(s.shards.Hash(r.Key)) == s.shards.At(hA) {
			reqB = r
		}
	}
	hB := s.shards.Hash(reqB.Key)
	slB := &s.demand[hB%demandSlots]

	// A comes back after an idle spell: its entry is found (this call
	// sweeps, sparing it as the one found) ...
	clk.Advance(time.Duration(s.idle)*time.Millisecond + time.Second)
	eA := s.entry(reqA, hA, slA, now(), 2, 0)
	// ... and before A's request uses it, B's requests make the shard's
	// next sweep due by use, in the same millisecond.
	for range 100 {
		s.entry(reqB, hB, slB, now(), 2, 0)
	}
	sh := s.shards.At(hA)
	sh.Lock()
	kept := sh.M[string(appendID(nil, reqA))] == eA
	sh.Unlock()
	if !kept {
		t.Fatal("a sweep dropped the entry a request had just been handed: what it books there is lost")
	}
}
