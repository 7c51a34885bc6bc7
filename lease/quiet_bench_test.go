package lease

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// BenchmarkQuietKeys measures what leases cost a key they never help: 1,000
// keys, each seeing one request a second of a fake clock that moves 1 ms a
// request, taken from memstore directly ("direct", the baseline) and through
// a lease store with its metrics registered ("lease"). The ratio of the two
// in one run is the lease store's price on quiet keys; cpu-ns/op is the
// process's CPU time per op, which other work on the machine does not
// inflate as it does ns/op. "lease-over-nothing"
// leases over a store that answers at once, so that its time is the lease
// layer's own.
func BenchmarkQuietKeys(b *testing.B) {
	const keys = 1000
	reqs := make([]limit.Request, keys)
	for i := range reqs {
		reqs[i] = limit.Request{Key: fmt.Sprint("k:quiet-", i), Limits: []limit.Limit{
			{Name: "s", Count: 10, Period: time.Second, Burst: 20},
			{Name: "m", Count: 600, Period: time.Minute},
		}}
	}
	for _, tc := range []struct {
		name    string
		lease   bool
		nothing bool // over a store that does nothing: the lease layer's own cost
	}{{"direct", false, false}, {"lease", true, false}, {"lease-over-nothing", true, true}} {
		for _, parallel := range []bool{false, true} {
			name := tc.name + "/serial"
			if parallel {
				name = tc.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				var ms atomic.Int64
				ms.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
				now := func() time.Time { return time.UnixMilli(ms.Load()) }
				var store limit.Store = memstore.New(memstore.Config{Now: now})
				if tc.nothing {
					store = stub{}
				}
				if tc.lease {
					s, err := New(store.(limit.Granter), Config{Fleet: limit.Fleet{Gateways: 1}, Now: now, Registerer: prometheus.NewRegistry()})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					store = s
				}
				var n atomic.Int64
				take := func() {
					i := n.Add(1)
					ms.Add(1) // a key every 1,000 requests: one request a second each
					d, err := store.Take(context.Background(), &reqs[i%keys])
					if err != nil || !d.Allowed {
						b.Errorf("quiet key: allowed %v, error %v; want allowed", d.Allowed, err)
					}
				}
				b.ReportAllocs()
				cpu0 := limittest.CPUTime()
				if !parallel {
					for b.Loop() {
						take()
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							take()
						}
					})
				}
				limittest.ReportCPU(b, cpu0)
			})
		}
	}
}
