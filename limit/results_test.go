package limit

import (
	"testing"
	"time"
)

func TestResultsRoundTrip(t *testing.T) {
	for _, rs := range [][]Result{
		nil,
		{{Allowed: true, Remaining: 3, ResetAfter: time.Second}},
		{{Allowed: false, Remaining: 0, RetryAfter: Never, ResetAfter: MaxWait}, {Allowed: true, Remaining: 1 << 60}},
	} {
		got := NewResults(rs)
		if got.Len() != len(rs) {
			t.Fatalf("NewResults(%v).Len() = %d, want %d", rs, got.Len(), len(rs))
		}
		for i := range rs {
			if r := got.At(i); r != rs[i] {
				t.Errorf("At(%d) = %+v, want %+v", i, r, rs[i])
			}
		}
		if got != NewResults(rs) {
			t.Errorf("two Results of %v are not equal", rs)
		}
	}
}

// TestResultOf checks the give-back rule: a limit with room in a refused
// group keeps the cost.
func TestResultOf(t *testing.T) {
	for _, tt := range []struct {
		name  string
		o     Outcome
		taken bool
		want  Result
	}{
		{"taken", Outcome{Allowed: true, Remaining: 4, ResetAfter: 20}, true, Result{Allowed: true, Remaining: 4, ResetAfter: 20 * time.Millisecond}},
		{"room, refused by another", Outcome{Allowed: true, Remaining: 4, ResetAfter: 20}, false, Result{Allowed: true, Remaining: 7, ResetAfter: 20 * time.Millisecond}},
		{"over", Outcome{Remaining: 1, RetryAfter: 5, ResetAfter: 9}, false, Result{Remaining: 1, RetryAfter: 5 * time.Millisecond, ResetAfter: 9 * time.Millisecond}},
		{"never", Outcome{RetryAfter: -1, ResetAfter: 9}, false, Result{RetryAfter: Never, ResetAfter: 9 * time.Millisecond}},
	} {
		if got := ResultOf(&tt.o, 3, tt.taken); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// BenchmarkDecideEach is what filling Results adds to combining two
// outcomes (DecideRequest alone, the Redis store's work before).
func BenchmarkDecideEach(b *testing.B) {
	outs := []Outcome{{Allowed: true, Remaining: 5, ResetAfter: 10}, {Allowed: true, Remaining: 2, ResetAfter: 30}}
	limits := []Limit{{Name: "a"}, {Name: "b"}}
	b.Run("DecideRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d := DecideRequest(outs, limits); !d.Allowed {
				b.Fatal(d)
			}
		}
	})
	b.Run("DecideEach", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d := DecideEach(outs, limits, 1); d.Results.Len() != 2 {
				b.Fatal(d)
			}
		}
	})
}
