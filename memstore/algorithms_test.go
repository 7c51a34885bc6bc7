package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// TestSlidingLogBounded drives a key at 100 times its sliding-log limit and
// checks that its stored log never holds more than the limit's count:
// refused requests must add no entries.
func TestSlidingLogBounded(t *testing.T) {
	tests := []struct {
		count int64
		cost  int64
	}{{10, 1}, {1000, 1}, {1000, 7}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d a second, cost %d", tt.count, tt.cost), func(t *testing.T) {
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
			s := New(Config{Shards: 1})
			req := &limit.Request{Key: "hot", Cost: tt.cost,
				Limits: []limit.Limit{{Name: "s", Count: tt.count, Period: time.Second, Algorithm: limit.SlidingLog}}}
			admitted, longest := int64(0), 0
			// 100 × count tokens asked for, spread over ten seconds.
			asks := 100 * tt.count / tt.cost
			for i := range asks {
				if s.TakeAt(now+10000*i/asks, req).Allowed {
					admitted += tt.cost
				}
				longest = max(longest, len(s.keys.Stripes()[0].M["hot"].slots[0].state.Log))
			}
			if longest > int(tt.count) {
				t.Errorf("longest log %d entries, want at most %d", longest, tt.count)
			}
			// Each second of the ten admits the count, less what a cost that
			// does not divide it leaves unused.
			if lo, hi := 10*(tt.count-tt.count%tt.cost), 10*tt.count; admitted < lo || admitted > hi {
				t.Errorf("admitted %d tokens in 10s, want %d to %d", admitted, lo, hi)
			}
		})
	}
}

// TestLogNotShared checks that a refused take leaves the stored log intact
// and that two keys never share a log's memory.
func TestLogNotShared(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	s := New(Config{Shards: 1})
	l := []limit.Limit{{Name: "s", Count: 3, Period: time.Second, Algorithm: limit.SlidingLog}, {Name: "t", Count: 2, Period: time.Second}}
	a := &limit.Request{Key: "a", Limits: l}
	for i := range int64(3) {
		s.TakeAt(now+i, a)
	}
	// Refused by "t" (empty), allowed by the log: the log must not change.
	before := append([]int64(nil), s.keys.Stripes()[0].M["a"].slots[0].state.Log...)
	if d := s.TakeAt(now+10, a); d.Allowed {
		t.Fatal("third take on a burst of 2 allowed")
	}
	if got := s.keys.Stripes()[0].M["a"].slots[0].state.Log; fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("log after a refused take %v, want unchanged %v", got, before)
	}
}

// BenchmarkTake measures one Take of each algorithm on a key that stays at
// its limit's edge, single-threaded and in parallel over 1,000 keys.
func BenchmarkTake(b *testing.B) {
	for _, alg := range limit.Algorithms {
		req := limit.Request{Limits: []limit.Limit{{Name: "m", Count: 1000, Period: time.Minute, Algorithm: alg}}}
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = fmt.Sprintf("key%d", i)
		}
		b.Run(string(alg), func(b *testing.B) {
			var clock int64 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
			s := New(Config{})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := req
				r.Key = keys[i%len(keys)]
				// 60ms a take per key: each key runs at its rate of 1,000 a minute.
				s.TakeAt(clock+int64(i/len(keys))*60, &r)
				i++
			}
		})
		b.Run(string(alg)+"/parallel", func(b *testing.B) {
			s := New(Config{})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := req
				i := 0
				for pb.Next() {
					r.Key = keys[i%len(keys)]
					if _, err := s.Take(context.Background(), &r); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
