package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// BenchmarkTake measures what the guard adds to a call: through a healthy
// in-process store (deadline and breaker bookkeeping), through a healthy
// store that answers at once doing nothing ("healthy over nothing": the
// guard's own cost, as over Redis, where the guard's work is all that is
// not the call), and answering from the local fallback while the breaker
// is open. cpu-ns/op is the process's CPU time per op, which other work on
// the machine does not inflate as it does ns/op.
func BenchmarkTake(b *testing.B) {
	for _, tc := range []struct {
		name   string
		remote limit.Granter
	}{
		{"healthy", memstore.New(memstore.Config{})},
		{"healthy over nothing", limittest.Plenty{Remaining: 1}},
		{"breaker open", down{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := guard.New(tc.remote, guard.Config{Fleet: limit.Fleet{Gateways: 10}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			cpu0 := limittest.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				req := &limit.Request{Key: "k:bench", Limits: []limit.Limit{{Name: "s", Count: 1 << 40, Period: time.Second}}}
				for pb.Next() {
					if _, err := s.Take(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			limittest.ReportCPU(b, cpu0)
		})
	}
}
