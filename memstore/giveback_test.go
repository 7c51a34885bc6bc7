package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// TestGiveBack: a take given back leaves every algorithm as it was, and a
// give-back never raises a limit above what it holds.
func TestGiveBack(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	ctx := context.Background()
	for _, alg := range limit.Algorithms {
		req := &limit.Request{Key: "k:" + string(alg), Cost: 2, Limits: []limit.Limit{{Name: "a", Count: 5, Period: time.Minute, Algorithm: alg}}}
		for i, want := range []int64{3, 3, 1} {
			d, err := s.Take(ctx, req)
			if err != nil || !d.Allowed || d.Remaining != want {
				t.Fatalf("%s take %d: got %+v, %v; want allowed with %d left", alg, i+1, d, err, want)
			}
			if i == 0 {
				if err := s.GiveBack(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Given back twice more than taken: still at most the limit.
		for range 3 {
			if err := s.GiveBack(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if d, _ := s.Take(ctx, &limit.Request{Key: req.Key, Cost: 1, Limits: req.Limits}); d.Remaining != 4 {
			t.Errorf("%s after giving back more than taken: got %d left, want 4 (5 less this take)", alg, d.Remaining)
		}
	}
}
