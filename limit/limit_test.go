package limit

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidateAlgorithms(t *testing.T) {
	tests := []struct {
		name    string
		limit   Limit
		wantErr string // empty: valid
	}{
		{"every algorithm is implemented", Limit{Name: "s", Count: 10, Period: time.Second, Algorithm: SlidingLog}, ""},
		{"unknown algorithm", Limit{Name: "s", Count: 10, Period: time.Second, Algorithm: "leaky"}, `unknown algorithm "leaky"`},
		{"gcra reduces 5,000 an hour to one unit a millisecond", Limit{Name: "h", Count: 5000, Period: time.Hour, Algorithm: GCRA}, ""},
		{"gcra at 2047 a second still fits", Limit{Name: "s", Count: 2047, Period: time.Second, Burst: 1, Algorithm: GCRA}, ""},
		{"gcra at 2049 a second counts too fine", Limit{Name: "s", Count: 2049, Period: time.Second, Algorithm: GCRA}, "too fine to stay exact until 2109"},
		{"the same rate is fine for the token bucket", Limit{Name: "s", Count: 2049, Period: time.Second}, ""},
		{"gcra with a large burst eats the headroom", Limit{Name: "s", Count: 2047, Period: time.Second, Burst: 8 << 30, Algorithm: GCRA}, "too fine"},
		{"sliding log at its cap", Limit{Name: "d", Count: MaxLogCount, Period: 24 * time.Hour, Algorithm: SlidingLog}, ""},
		{"sliding log above its cap", Limit{Name: "d", Count: MaxLogCount + 1, Period: 24 * time.Hour, Algorithm: SlidingLog}, "more than 10000 entries"},
		{"a window ignores a burst too large to count", Limit{Name: "s", Count: 10, Period: time.Hour, Burst: 1 << 50, Algorithm: FixedWindow}, ""},
		{"a bucket does not", Limit{Name: "s", Count: 10, Period: time.Hour, Burst: 1 << 50}, "burst 1125899906842624 times period"},
		{"burst × period just below 2^53", Limit{Name: "s", Count: 1<<52 - 1, Period: time.Millisecond, Burst: 1<<53 - 1}, ""},
		{"burst × period at 2^53", Limit{Name: "s", Count: 1 << 52, Period: time.Millisecond, Burst: 1 << 53}, "must be below 2^53"},
		// The longest wait must fit MaxWait, and so a time.Duration.
		{"sliding window over the rules' longest period", Limit{Name: "y", Count: 1, Period: 366 * 24 * time.Hour, Algorithm: SlidingWindow}, ""},
		{"sliding window waits two periods", Limit{Name: "y", Count: 1, Period: 367 * 24 * time.Hour, Algorithm: SlidingWindow}, "longer than 17568h"},
		{"sliding window over 200 years", Limit{Name: "y", Count: 1, Period: 200 * 365 * 24 * time.Hour, Algorithm: SlidingWindow}, "wait two periods"},
		{"fixed window over 200 years", Limit{Name: "y", Count: 1, Period: 200 * 365 * 24 * time.Hour, Algorithm: FixedWindow}, "wait two periods"},
		{"sliding log over 200 years", Limit{Name: "y", Count: 1, Period: 200 * 365 * 24 * time.Hour, Algorithm: SlidingLog}, "wait two periods"},
		{"bucket refilling in MaxWait", Limit{Name: "d", Count: 1, Period: 24 * time.Hour, Burst: 732}, ""},
		{"bucket refilling in more", Limit{Name: "d", Count: 1, Period: 24 * time.Hour, Burst: 733}, "takes 17592h0m0s to refill"},
		{"token bucket 1/ms with burst 1e13", Limit{Name: "s", Count: 1, Period: time.Millisecond, Burst: 1e13}, "to refill"},
		{"gcra 1/ms with burst 1e13", Limit{Name: "s", Count: 1, Period: time.Millisecond, Burst: 1e13, Algorithm: GCRA}, "to refill"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate(%v) = %v, want nil", tt.limit, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate(%v) = %v, want an error containing %q", tt.limit, err, tt.wantErr)
			case err != nil && !strings.Contains(err.Error(), `"`+tt.limit.Name+`"`):
				t.Errorf("Validate error %q does not name limit %q", err, tt.limit.Name)
			}
		})
	}
}

func TestEffectiveBurst(t *testing.T) {
	tests := []struct {
		alg   Algorithm
		burst int64
		want  int64
	}{
		{"", 0, 10}, {TokenBucket, 25, 25}, {GCRA, 25, 25}, {GCRA, 0, 10},
		{FixedWindow, 25, 10}, {SlidingWindow, 25, 10}, {SlidingLog, 25, 10},
	}
	for _, tt := range tests {
		l := Limit{Name: "s", Count: 10, Period: time.Second, Burst: tt.burst, Algorithm: tt.alg}
		if got := l.EffectiveBurst(); got != tt.want {
			t.Errorf("%s with burst %d: EffectiveBurst() = %d, want %d", l.Alg(), tt.burst, got, tt.want)
		}
	}
}

func TestLimitString(t *testing.T) {
	tests := []struct {
		limit Limit
		want  string
	}{
		{Limit{Name: "s", Count: 100, Period: time.Second, Burst: 200}, "s: 100 per 1s, burst 200, token_bucket"},
		{Limit{Name: "s", Count: 100, Period: time.Second, Algorithm: GCRA}, "s: 100 per 1s, burst 100, gcra"},
		{Limit{Name: "h", Count: 5000, Period: time.Hour, Burst: 9, Algorithm: SlidingWindow}, "h: 5000 per 1h0m0s, sliding_window"},
	}
	for _, tt := range tests {
		if got := tt.limit.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestDecideSaturates feeds Decide waits too long for a time.Duration, as
// only a limit Validate refuses could produce: they saturate, never wrapping
// round to a negative Duration that reads as Never or as no wait.
func TestDecideSaturates(t *testing.T) {
	const huge = 300 * 365 * 24 * 3600 * 1000 // 300 years in ms, past time.Duration's 292
	tests := []struct {
		out                  Outcome
		wantRetry, wantReset time.Duration
	}{
		{Outcome{RetryAfter: huge, ResetAfter: huge}, math.MaxInt64, math.MaxInt64},
		{Outcome{RetryAfter: math.MaxInt64, ResetAfter: 5}, math.MaxInt64, 5 * time.Millisecond},
		{Outcome{RetryAfter: -1, ResetAfter: huge}, Never, math.MaxInt64},
		{Outcome{RetryAfter: MaxWait.Milliseconds(), ResetAfter: MaxWait.Milliseconds()}, MaxWait, MaxWait},
	}
	for _, tt := range tests {
		d := Decide([]Outcome{tt.out})
		if d.RetryAfter != tt.wantRetry || d.ResetAfter != tt.wantReset {
			t.Errorf("Decide(retry %dms, reset %dms): got retry %v reset %v, want %v %v",
				tt.out.RetryAfter, tt.out.ResetAfter, d.RetryAfter, d.ResetAfter, tt.wantRetry, tt.wantReset)
		}
	}
}

// BenchmarkValidate measures Request.Validate on a request of two limits,
// a gateway's usual: what each layer that validated again used to spend per
// request, and what the stores now leave to the top of the stack.
func BenchmarkValidate(b *testing.B) {
	req := &Request{Key: "k:a", Limits: []Limit{
		{Name: "s", Count: 10, Period: time.Second, Burst: 20},
		{Name: "m", Count: 100, Period: time.Minute, Algorithm: SlidingWindow},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if err := req.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
