package memstore

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// BenchmarkResults measures what carrying every limit's own answer
// (limit.Decision.Results) costs a take of two limits: "without" is the
// take as it was, the Decision alone; "with" is TakeAt, which also fills
// Results. Compare the two in one run:
// go test -run '^$' -bench Results ./memstore.
func BenchmarkResults(b *testing.B) {
	lim := []limit.Limit{
		{Name: "s", Count: 1_000_000_000, Period: time.Second},
		{Name: "m", Count: 1_000_000_000, Period: time.Minute, Algorithm: limit.SlidingWindow},
	}
	req := &limit.Request{Key: "k:one", Limits: lim}
	b.Run("without", func(b *testing.B) {
		s := New(Config{})
		b.ReportAllocs()
		now := int64(1_700_000_000_000)
		for b.Loop() {
			now++
			sh := s.keys.Of(req.Key)
			sh.Lock()
			d := take(sh, now, req, 1, false, nil)
			sh.Unlock()
			if !d.Allowed {
				b.Fatal(d)
			}
		}
	})
	b.Run("with", func(b *testing.B) {
		s := New(Config{})
		b.ReportAllocs()
		now := int64(1_700_000_000_000)
		for b.Loop() {
			now++
			if d := s.TakeAt(now, req); !d.Allowed || d.Results.Len() != 2 {
				b.Fatal(d)
			}
		}
	})
}
