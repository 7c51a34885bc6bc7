package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestGiveBack gives back takes of every algorithm, on a standalone server
// and a cluster, and requires the answers memstore's GiveBack leads to:
// a take given back is as if it never was, and giving back more than was
// taken never raises a limit above what it holds.
func TestGiveBack(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ctx := context.Background()
	for _, tg := range []struct {
		name  string
		addrs []string
	}{{"Standalone", []string{standalone.Addr()}}, {"Cluster", cluster.Addrs()}} {
		t.Run(tg.name, func(t *testing.T) {
			red := newStore(t, redisstore.Config{Addrs: tg.addrs, Now: clock})
			mem := memstore.New(memstore.Config{Now: clock})
			for _, alg := range limit.Algorithms {
				req := &limit.Request{Key: uniqueKey(t), Cost: 2, Limits: []limit.Limit{
					{Name: "a", Count: 5, Period: time.Minute, Algorithm: alg},
					{Name: "b", Count: 7, Period: 10 * time.Second, Burst: 9, Algorithm: alg},
				}}
				// take, give back, take, take, give back three times, take 1
				for step, op := range []string{"take", "give", "take", "take", "give", "give", "give", "take"} {
					if op == "give" {
						if err := red.GiveBack(ctx, req); err != nil {
							t.Fatalf("%s step %d: redis: %v", alg, step, err)
						}
						if err := mem.GiveBack(ctx, req); err != nil {
							t.Fatalf("%s step %d: memory: %v", alg, step, err)
						}
						continue
					}
					got, want := take(t, red, req), take(t, mem, req)
					got.Source, want.Source = "", ""
					if got != want {
						t.Fatalf("%s step %d: redis %+v, memory %+v", alg, step, got, want)
					}
				}
			}
		})
	}
}
