package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/redisstore"
)

func TestTakeUpToConformance(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			limittest.RunGranter(t, func(t *testing.T, now func() time.Time) limit.Granter {
				return newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: now})
			})
		})
	}
	t.Run("Standalone/scripts", func(t *testing.T) {
		limittest.RunGranter(t, func(t *testing.T, now func() time.Time) limit.Granter {
			s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}, Now: now})
			redisstore.UseScripts(s)
			return s
		})
	})
}

// TestTakeUpToRedisClock runs without a test clock, as production does: the
// script reads Redis's TIME.
func TestTakeUpToRedisClock(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: cluster.Addrs()})
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Hour, Burst: 10}}}
	for i, want := range []int64{4, 4, 2, 0} {
		g, d, err := s.TakeUpTo(context.Background(), req, 4)
		if err != nil {
			t.Fatal(err)
		}
		if g != want || d.Allowed != (want > 0) {
			t.Errorf("grant %d of up to 4 from a burst of 10: got %d (allowed %v), want %d", i+1, g, d.Allowed, want)
		}
	}
}
