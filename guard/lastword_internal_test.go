package guard

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// BenchmarkNote is what remembering the shared store's word costs each
// shared decision: one hot key from every goroutine, and many keys.
func BenchmarkNote(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:key_%08x", i*2654435761)
	}
	limits := []limit.Limit{{Name: "s", Count: 100, Period: time.Second}}
	for _, tc := range []struct {
		name string
		keys []string
	}{{"hot key", keys[:1]}, {"many keys", keys}} {
		b.Run(tc.name, func(b *testing.B) {
			w := newLastWords()
			d := limit.Decision{Allowed: true, Remaining: 42}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					req := limit.Request{Key: tc.keys[i%len(tc.keys)], Limits: limits}
					w.note(int64(i), &req, &d)
				}
			})
		})
	}
}
