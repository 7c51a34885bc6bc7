package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// BenchmarkDecide measures the lease store's own cost per request: a busy
// key served from its lease (refills included, from an in-process shared
// store), and a runaway key refused from the refusal cache.
func BenchmarkDecide(b *testing.B) {
	for _, tc := range []struct {
		name string
		l    limit.Limit
	}{
		{"leased", limit.Limit{Name: "s", Count: 1 << 40, Period: time.Second, Burst: 1 << 40}},
		{"refused", limit.Limit{Name: "s", Count: 1, Period: time.Hour}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g, err := guard.New(memstore.New(memstore.Config{}), guard.Config{})
			if err != nil {
				b.Fatal(err)
			}
			s, err := New(g, Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := &limit.Request{Key: fmt.Sprint("k:", tc.name), Limits: []limit.Limit{tc.l}}
				for pb.Next() {
					if _, err := s.Take(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
