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
			if checkErr(t, got, err, tt.wantErr) {
				return
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

// checkErr fails the test unless err is what a case wants: an error with
// wantErr in it, or none when wantErr is empty. It reports whether the case
// ends there, with the error it wanted.
func checkErr(t *testing.T, got []limit.Outcome, err error, wantErr string) bool {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("got %v, %v; want an error with %q", got, err, wantErr)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// packOne builds the 32-byte reply to a take of one limit that is not a
// token bucket, as lua/take.lua packs it.
func packOne(v ...float64) string {
	var b []byte
	for _, f := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b)
}

// TestParseOne checks how the reply to a take of one window limit at its
// cost becomes the grant and the outcome, and that anything else is an
// error naming what is wrong.
func TestParseOne(t *testing.T) {
	tests := []struct {
		name        string
		reply       string
		wantGranted int64
		want        limit.Outcome
		wantErr     string
	}{
		{"allowed", packOne(1, 7, 0, 30_000), 3, limit.Outcome{Allowed: true, Remaining: 7, ResetAfter: 30_000}, ""},
		{"refused", packOne(0, 1, 1500, 30_000), 0, limit.Outcome{Remaining: 1, RetryAfter: 1500, ResetAfter: 30_000}, ""},
		{"never", packOne(0, 0, -1, 30_000), 0, limit.Outcome{RetryAfter: -1, ResetAfter: 30_000}, ""},
		{"short", packOne(1, 7, 0), 0, limit.Outcome{}, "reply of 24 bytes"},
		{"fraction", packOne(1, 0.5, 0, 1), 0, limit.Outcome{}, "reply value 1 is 0.5"},
		{"NaN", packOne(1, 1, 0, math.NaN()), 0, limit.Outcome{}, "reply value 3"},
		{"allowed twice", packOne(2, 1, 0, 1), 0, limit.Outcome{}, "allowed is 2"},
		{"negative remaining", packOne(1, -1, 0, 1), 0, limit.Outcome{}, "must not be negative"},
		{"allowed with a wait", packOne(1, 1, 5, 1), 0, limit.Outcome{}, "allowed 1 with retry 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			granted, got, err := parseOne(nil, tt.reply, 3)
			if checkErr(t, got, err, tt.wantErr) {
				return
			}
			if granted != tt.wantGranted || len(got) != 1 || !sameOutcome(got[0], tt.want) {
				t.Errorf("got %d, %+v; want %d, %+v", granted, got, tt.wantGranted, tt.want)
			}
		})
	}
}
