package share_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/share"
)

// BenchmarkTake measures what the share layer adds to a request: the same
// requests straight to an in-process store (the baseline), and through a
// share layer over it whose table balances 10000 keys.
func BenchmarkTake(b *testing.B) {
	l := limit.Limit{Name: "s", Count: 1 << 40, Period: time.Second, Burst: 1 << 40}
	table := &share.Table{Version: 1, Default: 300_000, Shares: map[share.Pair]uint32{}}
	for i := range 10000 {
		table.Shares[share.Pair{Key: "k:" + strconv.Itoa(i), Limit: "s"}] = 600_000
	}
	for _, tc := range []struct {
		name  string
		layer bool
	}{{"memstore", false}, {"share", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var s limit.Store = memstore.New(memstore.Config{})
			if tc.layer {
				ss, err := share.New(s, share.Config{Regions: 3})
				if err != nil {
					b.Fatal(err)
				}
				if err := ss.Set(table); err != nil {
					b.Fatal(err)
				}
				s = ss
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					req := &limit.Request{Key: "k:" + strconv.Itoa(i%20000), Limits: []limit.Limit{l}}
					if _, err := s.Take(context.Background(), req); err != nil {
						b.Error(err)
					}
					i++
				}
			})
		})
	}
}
