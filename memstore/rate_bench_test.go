package memstore_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// BenchmarkMemstore and BenchmarkXTimeRate are one pair: the same check
// (one token bucket whose limit is so high that every take is allowed, the
// clock read on every call) by a memstore Take and by x/time/rate's
// Limiter.Allow, the single-process baseline. Run them in the same run and
// compare: go test -run '^$' -bench 'Memstore$|XTimeRate$' ./memstore.
func BenchmarkMemstore(b *testing.B) {
	lim := []limit.Limit{{Name: "s", Count: 1_000_000_000, Period: time.Second}}
	b.Run("serial", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		req := &limit.Request{Key: "k:one", Limits: lim}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("parallel-one-key", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := &limit.Request{Key: "k:one", Limits: lim}
			ctx := context.Background()
			for pb.Next() {
				if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
					b.Error(d, err)
					return
				}
			}
		})
	})
}

// BenchmarkXTimeRate is BenchmarkMemstore's baseline; see there.
func BenchmarkXTimeRate(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		l := rate.NewLimiter(1_000_000_000, 1_000_000_000)
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("parallel-one-key", func(b *testing.B) {
		l := rate.NewLimiter(1_000_000_000, 1_000_000_000)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !l.Allow() {
					b.Error("refused")
					return
				}
			}
		})
	})
}
