package memstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// TestManyLimitsOneKey: a key that sees thousands of distinct limits over
// time (one per descriptor value, as the rls service keeps them) holds only
// the live ones, and still decides each exactly.
func TestManyLimitsOneKey(t *testing.T) {
	s := New(Config{})
	const n = 5000
	for i := range n {
		now := int64(1_000_000 + i) // one new limit every millisecond
		l := limit.Limit{Name: fmt.Sprintf("d%d", i), Count: 2, Period: 100 * time.Millisecond}
		req := &limit.Request{Key: "rls:domain", Limits: []limit.Limit{l}}
		for want := range []bool{true, true, false} {
			if d := s.TakeAt(now, req); d.Allowed != (want < 2) {
				t.Fatalf("limit %d, take %d: allowed %v, want %v", i, want+1, d.Allowed, want < 2)
			}
		}
		// The limit used up 20 ms ago (0.4 tokens back) still refuses.
		if i >= 20 {
			old := limit.Limit{Name: fmt.Sprintf("d%d", i-20), Count: 2, Period: 100 * time.Millisecond}
			if d := s.TakeAt(now, &limit.Request{Key: "rls:domain", Limits: []limit.Limit{old}}); d.Allowed {
				t.Fatalf("limit %d, 20 ms after it was used up: allowed again", i-20)
			}
		}
	}
	sh := s.keys.Of("rls:domain")
	sh.Lock()
	defer sh.Unlock()
	// About 100 ms of limits are live (each refills in 100 ms); the slots
	// may hold up to twice the live ones between compactions.
	if got := len(sh.M["rls:domain"].slots); got > 400 {
		t.Errorf("the key holds %d slots after %d limits, want only the live ones (about 100, at most 400)", got, n)
	}
}

func BenchmarkManyLimitsOneKey(b *testing.B) {
	for _, live := range []int{10, 10_000} {
		b.Run(fmt.Sprint(live), func(b *testing.B) {
			s := New(Config{})
			reqs := make([]limit.Request, live)
			for i := range reqs {
				reqs[i] = limit.Request{Key: "rls:domain", Limits: []limit.Limit{{Name: fmt.Sprintf("d%d", i), Count: 1e9, Period: time.Hour}}}
				s.TakeAt(1_000_000, &reqs[i])
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.TakeAt(1_000_000, &reqs[i%live])
				i++
			}
		})
	}
}
