package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// BenchmarkCost measures what each layer costs a decision, beside the
// store it wraps, in one run: the guard alone over memstore, leases over
// the guard over memstore, and the pipeline over a real Redis beside the
// bare Redis store, each on 10,000 quiet keys (batches of one, so every
// decision reaches the store) and, for the layered stacks, one busy key
// (served from leases). Calls carry a cancellable context, as net/http's
// requests do. cpu-ns/op is the process's CPU time per decision, which
// other work on the machine does not inflate as it does ns/op. It uses
// only zero configurations, so the same file runs on an older tree for a
// before-and-after ratio (docs/benchmarks.md).
func BenchmarkCost(b *testing.B) {
	srv := redistest.Standalone(b)
	rs, err := redisstore.New(b.Context(), redisstore.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	p, err := pipeline.New(b.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	mem := memstore.New(memstore.Config{})
	g, err := guard.New(memstore.New(memstore.Config{}), guard.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	lg, err := guard.New(memstore.New(memstore.Config{}), guard.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer lg.Close()
	l, err := lease.New(lg, lease.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()

	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:key_%08x", i*2654435761)
	}
	quiet := []limit.Limit{{Name: "s", Count: 9, Period: time.Second, Burst: 1 << 20}, {Name: "m", Count: 1 << 30, Period: time.Minute}}
	busy := []limit.Limit{{Name: "s", Count: 1 << 30, Period: time.Second}}
	for _, tc := range []struct {
		name   string
		store  limit.Store
		limits []limit.Limit
		keys   []string
	}{
		{"memstore", mem, quiet, keys},
		{"guard-memstore", g, quiet, keys},
		{"lease-guard-memstore", l, quiet, keys},
		{"lease-guard-memstore/busy", l, busy, keys[:1]},
		{"redis", rs, quiet, keys},
		{"pipeline-redis", p, quiet, keys},
		{"pipeline-redis/busy", p, busy, keys[:1]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			cpu := limittest.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					i++
					req := limit.Request{Key: tc.keys[i%len(tc.keys)], Limits: tc.limits}
					if _, err := tc.store.Take(ctx, &req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			limittest.ReportCPU(b, cpu)
		})
	}
}
