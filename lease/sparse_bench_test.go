package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
)

// BenchmarkSparseKeys measures the lease and guard layers' own cost on the
// traffic of the gateway's CPU profile (issue 28): 10,000 keys picked at
// random, 16 requests a millisecond of a fake clock (about 1.6 requests a
// second a key), one token bucket of 100 a second, burst 200, over a
// shared store that grants everything at once doing nothing. Random keys
// collide in the demand sketch and come twice in a window now and then, as
// real ones do, where BenchmarkQuietKeys's round robin never does. "lease"
// is the lease layer alone; "guard+lease" is the production order, the
// lease store over the guard (on the real clock, as in production) over
// the store. cpu-ns/op is the process's CPU time per op.
func BenchmarkSparseKeys(b *testing.B) {
	const keys = 10_000
	reqs := make([]limit.Request, keys)
	for i := range reqs {
		reqs[i] = limit.Request{Key: fmt.Sprint("k:sparse-", i), Limits: []limit.Limit{
			{Name: "s", Count: 100, Period: time.Second, Burst: 200},
		}}
	}
	for _, guarded := range []bool{false, true} {
		for _, parallel := range []bool{false, true} {
			name := map[bool]string{false: "lease", true: "guard+lease"}[guarded] +
				map[bool]string{false: "/serial", true: "/parallel"}[parallel]
			b.Run(name, func(b *testing.B) {
				var n atomic.Int64
				t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
				now := func() time.Time { return time.UnixMilli(t0 + n.Load()/16) }
				var inner limit.Granter = limittest.Plenty{Remaining: 100}
				if guarded {
					g, err := guard.New(inner, guard.Config{})
					if err != nil {
						b.Fatal(err)
					}
					defer g.Close()
					inner = g
				}
				s, err := New(inner, Config{Now: now, Registerer: prometheus.NewRegistry()})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var seed atomic.Uint64
				b.ReportAllocs()
				cpu0 := limittest.CPUTime()
				run := func(pb func() bool) {
					rng := rand.New(rand.NewPCG(seed.Add(1), 28))
					for pb() {
						n.Add(1)
						d, err := s.Take(context.Background(), &reqs[rng.IntN(keys)])
						if err != nil || !d.Allowed {
							b.Errorf("sparse key: allowed %v, error %v; want allowed", d.Allowed, err)
							return
						}
					}
				}
				if parallel {
					b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
				} else {
					run(b.Loop)
				}
				limittest.ReportCPU(b, cpu0)
			})
		}
	}
}
