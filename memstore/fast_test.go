package memstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// TestFastPathMatchesGeneral: Take's in-place path for a known token
// bucket answers and stores exactly what the general path (TakeAt, which
// never takes it) does, across costs, clock steps, rate and burst changes
// and requests over the burst.
func TestFastPathMatchesGeneral(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start
	fast := New(Config{Now: func() time.Time { return now }})
	general := New(Config{})
	limits := []limit.Limit{
		{Name: "s", Count: 10, Period: time.Second, Burst: 20},
		{Name: "s", Count: 3, Period: time.Second, Burst: 5},
		{Name: "s", Count: 7, Period: 250 * time.Millisecond},
		{Name: "s", Count: 10, Period: time.Second, Burst: 20, Algorithm: limit.GCRA},
	}
	for i := range 20_000 {
		j := rng.IntN(len(limits))
		req := &limit.Request{Key: []string{"a", "b"}[rng.IntN(2)], Cost: rng.Int64N(4), Limits: limits[j : j+1]}
		if rng.IntN(50) == 0 {
			req.Cost = 30 // over every burst
		}
		now = now.Add(time.Duration(rng.IntN(120)) * time.Millisecond)
		got, err := fast.Take(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		want := general.TakeAt(now.UnixMilli(), req)
		if got != want {
			t.Fatalf("take %d (%+v at %v): fast path %+v, general %+v", i, req, now.Sub(start), got, want)
		}
	}
}

// A request's own time (limit.Request.At) is the time it is taken at, on
// either path, ahead of the store's clock.
func TestRequestTime(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := New(Config{Now: func() time.Time { return start }})
	l := []limit.Limit{{Name: "s", Count: 1, Period: time.Second}}
	for i, tt := range []struct {
		at   time.Time
		want bool
	}{
		{time.Time{}, true},                        // the store's clock: start
		{time.Time{}, false},                       // still start: empty
		{start.Add(999 * time.Millisecond), false}, // not yet refilled
		{start.Add(time.Second), true},             // refilled at the request's time
		{start.Add(2 * time.Second), true},         // and again
		{time.Time{}, false},                       // the store's clock is behind: nothing back
	} {
		d, err := s.Take(context.Background(), &limit.Request{Key: "k", Limits: l, At: tt.at})
		if err != nil || d.Allowed != tt.want {
			t.Errorf("take %d at %v: allowed %v (error %v), want %v", i+1, tt.at, d.Allowed, err, tt.want)
		}
	}
}
