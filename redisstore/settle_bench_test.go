package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// BenchmarkSettle measures the settle path beside a plain take in the same
// run, on the package's standalone server: a take of the estimate alone,
// then with the rest taken (the take library's charge), then with the unused part given
// back (giveback.lua). Keys rotate so that no bucket runs dry.
func BenchmarkSettle(b *testing.B) {
	s := newStore(b, redisstore.Config{Addrs: []string{standalone.Addr()}})
	ctx := context.Background()
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.FixedWindow, limit.SlidingWindow} {
		lim := []limit.Limit{{Name: "s", Count: 1_000_000, Period: time.Second, Burst: 1_000_000, Algorithm: alg}}
		for _, bc := range []struct {
			name  string
			delta int64
		}{{"take", 0}, {"take+rest", 3}, {"take+giveback", -1}} {
			b.Run(string(alg)+"/"+bc.name, func(b *testing.B) {
				b.ReportAllocs()
				req := &limit.Request{Key: "bench-settle", Cost: 2, Limits: lim}
				for b.Loop() {
					if _, err := s.Take(ctx, req); err != nil {
						b.Fatal(err)
					}
					if bc.delta != 0 {
						if _, err := s.Settle(ctx, req, bc.delta); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
