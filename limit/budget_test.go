package limit_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

func TestBudget(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name string
		l    limit.Limit
		d    limit.Decision
		want []string // name: value
	}{
		{"allowed bucket: the window is the time to fill the burst",
			limit.Limit{Name: "s", Count: 10, Period: sec, Burst: 20}, limit.Decision{Allowed: true, Remaining: 7, ResetAfter: 1300 * time.Millisecond},
			[]string{`RateLimit-Policy: "s";q=20;w=2`, `RateLimit: "s";r=7;t=2`, "X-RateLimit-Limit: 20", "X-RateLimit-Remaining: 7", "X-RateLimit-Reset: 2"}},
		{"refused window: Retry-After rounds up",
			limit.Limit{Name: "h", Count: 100, Period: time.Hour, Algorithm: limit.FixedWindow}, limit.Decision{RetryAfter: 1500 * time.Millisecond, ResetAfter: 1500 * time.Millisecond},
			[]string{`RateLimit-Policy: "h";q=100;w=3600`, `RateLimit: "h";r=0;t=2`, "X-RateLimit-Limit: 100", "X-RateLimit-Remaining: 0", "X-RateLimit-Reset: 2", "Retry-After: 2"}},
		{"never passes: retry after the period",
			limit.Limit{Name: "m", Count: 5, Period: time.Minute}, limit.Decision{RetryAfter: limit.Never, Remaining: 5},
			[]string{`RateLimit-Policy: "m";q=5;w=60`, `RateLimit: "m";r=5;t=0`, "X-RateLimit-Limit: 5", "X-RateLimit-Remaining: 5", "X-RateLimit-Reset: 0", "Retry-After: 60"}},
		{"refused with no wait: Retry-After at least 1; a quote in the name escaped",
			limit.Limit{Name: `a"b`, Count: 1, Period: time.Millisecond}, limit.Decision{Remaining: -1},
			[]string{`RateLimit-Policy: "a\"b";q=1;w=1`, `RateLimit: "a\"b";r=0;t=0`, "X-RateLimit-Limit: 1", "X-RateLimit-Remaining: 0", "X-RateLimit-Reset: 0", "Retry-After: 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := limit.BudgetOf(&tt.l, &tt.d)
			var got []string
			for i, v := range b.AppendValues(nil) {
				got = append(got, limit.FieldName(i)+": "+v)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBudgetValuesAllocateOnce(t *testing.T) {
	l := limit.Limit{Name: "s", Count: 10, Period: time.Second}
	b := limit.BudgetOf(&l, &limit.Decision{RetryAfter: time.Second})
	var arr [6]string
	if got := testing.AllocsPerRun(100, func() { b.AppendValues(arr[:0]) }); got != 1 {
		t.Errorf("got %v allocations, want 1", got)
	}
}
