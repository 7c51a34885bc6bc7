package redisstore

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// packState builds a token bucket's 24-byte value as lua/alg_token_bucket.lua
// packs it.
func packState(credits, ttl, last float64) string {
	b := make([]byte, 0, stateSize)
	for _, f := range []float64{credits, ttl, last} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b)
}

// sameOutcome reports whether a and b answer alike: the fields a reply
// carries, not the state to store.
func sameOutcome(a, b limit.Outcome) bool {
	return a.Allowed == b.Allowed && a.Remaining == b.Remaining &&
		a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter
}

// TestParseStates checks how a string reply, the states a take that gave
// every token bucket what it wanted wrote, becomes outcomes: exactly as
// limit.Evaluate reports them, and anything that is not such a reply an
// error naming what is wrong.
func TestParseStates(t *testing.T) {
	tb := limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 20} // capacity 20000
	win := limit.Limit{Name: "m", Count: 10, Period: time.Minute, Algorithm: limit.FixedWindow}
	tests := []struct {
		name    string
		states  string
		limits  []limit.Limit
		want    []limit.Outcome
		wantErr string
	}{
		{"one", packState(17_000, 300, 0), []limit.Limit{tb},
			[]limit.Outcome{{Allowed: true, Remaining: 17, ResetAfter: 300}}, ""},
		{"part of a token", packState(16_999, 301, 0), []limit.Limit{tb},
			[]limit.Outcome{{Allowed: true, Remaining: 16, ResetAfter: 301}}, ""},
		{"empty bucket", packState(0, 2000, 1_700_000_000_000), []limit.Limit{tb},
			[]limit.Outcome{{Allowed: true, Remaining: 0, ResetAfter: 2000}}, ""},
		{"two", packState(20_000, 1, 0) + packState(5_000, 1500, 0), []limit.Limit{tb, tb},
			[]limit.Outcome{{Allowed: true, Remaining: 20, ResetAfter: 0}, {Allowed: true, Remaining: 5, ResetAfter: 1500}}, ""},
		{"short", packState(1, 1, 0)[:23], []limit.Limit{tb}, nil, "reply of 23 bytes"},
		{"one state for two limits", packState(1, 1, 0), []limit.Limit{tb, tb}, nil, "reply of 24 bytes"},
		{"not a token bucket", packState(1, 1, 0), []limit.Limit{win}, nil, "not a token bucket"},
		{"fraction", packState(0.5, 1, 0), []limit.Limit{tb}, nil, "credits left"},
		{"negative", packState(-1000, 1, 0), []limit.Limit{tb}, nil, "credits left"},
		{"over capacity", packState(20_001, 1, 0), []limit.Limit{tb}, nil, "credits left"},
		{"NaN", packState(math.NaN(), 1, 0), []limit.Limit{tb}, nil, "credits left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStates(nil, tt.states, tt.limits)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d outcomes, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if !sameOutcome(got[i], tt.want[i]) {
					t.Errorf("limit %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
	// Every outcome equals the model's for the same take from a full bucket.
	for cost := int64(1); cost <= tb.Burst; cost++ {
		o := limit.Evaluate(&tb, &limit.State{}, 1_700_000_000_000, cost)
		got, err := parseStates(nil, packState(float64(o.Next.A), float64(o.TTL), 0), []limit.Limit{tb})
		if err != nil || !sameOutcome(got[0], o) {
			t.Errorf("cost %d: got %+v, %v; want %+v", cost, got, err, o)
		}
	}
}
