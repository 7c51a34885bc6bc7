package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

func TestConformance(t *testing.T) {
	limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store {
		return memstore.New(memstore.Config{Now: now})
	})
}

func TestRefusalsCount(t *testing.T) {
	limittest.RunRefusals(t, func(t *testing.T, now func() time.Time) limit.Store {
		return memstore.New(memstore.Config{Now: now})
	})
}

// An idle key whose limits would be full again is dropped, so memory is
// bounded by the keys active within their refill time, not by every key
// ever seen.
func TestIdleKeysDropped(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.Config{Now: clock.Now, Shards: 4})
	l := []limit.Limit{{Name: "s", Count: 10, Period: time.Second, Burst: 20}}
	take := func(key string) {
		if _, err := s.Take(context.Background(), &limit.Request{Key: key, Limits: l}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10_000 {
		take(fmt.Sprintf("old-%d", i))
	}
	if got := s.Len(); got != 10_000 {
		t.Fatalf("after 10,000 keys took one token each: %d keys held, want 10,000", got)
	}
	// One token refills in 100 ms; after that every old key is full again.
	clock.Advance(100 * time.Millisecond)
	for i := range 20_000 {
		take(fmt.Sprintf("new-%d", i%100))
	}
	if got := s.Len(); got > 100 {
		t.Errorf("after the old keys refilled and 100 keys stayed busy: %d keys held, want at most 100", got)
	}
}

// TestConformanceOwnClock runs the suite on the store's own monotonic
// clock, the one it reads in production.
func TestConformanceOwnClock(t *testing.T) {
	limittest.RunOwnClock(t, func(t *testing.T) limit.Store { return memstore.New(memstore.Config{}) })
}
