package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
)

// shedding refuses the first call (retry in 1 ms), then holds each call a
// while and sheds it, as the guard does on a busy gateway, or panics.
type shedding struct {
	calls, inFlight, maxInFlight atomic.Int64
	panicky                      atomic.Bool
}

func (s *shedding) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	_, d, err := s.TakeUpTo(ctx, req, req.EffectiveCost())
	return d, err
}

func (s *shedding) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	if s.calls.Add(1) == 1 {
		return 0, limit.Decision{RetryAfter: time.Millisecond, Source: limit.FromRedis}, nil
	}
	if s.panicky.Load() {
		panic("inner store failed")
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	return 0, limit.Decision{RetryAfter: time.Second, Source: limit.FromShed}, fmt.Errorf("lease test: %w", guard.ErrShed)
}

// TestWaitersOfAFailedFlightAskAtOnce: when the one call in flight for a
// refused key ends without a shared answer (here, shed), the requests that
// waited for it ask at once, side by side, rather than one after another,
// each waiting out the guard's bound again.
func TestWaitersOfAFailedFlightAskAtOnce(t *testing.T) {
	inner := &shedding{}
	s, err := New(inner, Config{Fleet: limit.Fleet{Gateways: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := &limit.Request{Key: "k", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}}}
	if d, _ := s.Take(context.Background(), req); d.Allowed {
		t.Fatal("the first call was not refused")
	}
	time.Sleep(10 * time.Millisecond) // the remembered refusal runs out
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := s.Take(context.Background(), req); err == nil {
				t.Error("a shed call answered without its error")
			}
		})
	}
	wg.Wait()
	if got := inner.maxInFlight.Load(); got < 2 {
		t.Errorf("%d calls asked the store, at most %d at a time: the waiters took turns", inner.calls.Load()-1, got)
	}
}

// TestPanicInStoreReleasesTheFlight: a panic in the store (recovered
// above, as net/http does) does not leave the key's flight open, and the
// next request is answered.
func TestPanicInStoreReleasesTheFlight(t *testing.T) {
	inner := &shedding{}
	inner.panicky.Store(true)
	s, err := New(inner, Config{Fleet: limit.Fleet{Gateways: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := &limit.Request{Key: "k", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}}}
	s.Take(context.Background(), req)
	time.Sleep(10 * time.Millisecond)
	func() {
		defer func() { recover() }()
		s.Take(context.Background(), req)
	}()
	inner.panicky.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Take(ctx, req); ctx.Err() != nil {
		t.Fatalf("the key hung after a panic in the store: %v", err)
	}
}
