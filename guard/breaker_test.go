package guard

import (
	"errors"
	"testing"
	"time"
)

// TestBreaker drives one breaker through scenarios written as steps: at a
// time (ms from the start), either ask whether a call may go ("admit") and
// compare the answer, or report its outcome ("ok", "fail", "abandon").
func TestBreaker(t *testing.T) {
	type step struct {
		at    int64
		op    string // admit, ok, fail, abandon
		call  bool   // admit: want a call
		probe bool   // admit: want it to be the probe; ok/fail/abandon: it was
		state State  // the state after the step
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"closed stays closed on success", []step{
			{0, "admit", true, false, Closed}, {0, "ok", false, false, Closed},
		}},
		{"opens after 3 consecutive failures", []step{
			{0, "fail", false, false, Closed}, {1, "fail", false, false, Closed}, {2, "fail", false, false, Open},
			{3, "admit", false, false, Open},
		}},
		{"a success in between resets the count", []step{
			{0, "fail", false, false, Closed}, {1, "fail", false, false, Closed}, {2, "ok", false, false, Closed},
			{3, "fail", false, false, Closed}, {4, "fail", false, false, Closed}, {5, "fail", false, false, Open},
		}},
		{"after the pause one probe, the rest answered locally", []step{
			{0, "fail", false, false, Closed}, {0, "fail", false, false, Closed}, {0, "fail", false, false, Open},
			{1999, "admit", false, false, Open},
			{2000, "admit", true, true, HalfOpen}, {2000, "admit", false, false, HalfOpen}, {2500, "admit", false, false, HalfOpen},
			{2600, "ok", false, true, Closed}, {2600, "admit", true, false, Closed},
		}},
		{"failed probe opens it for another pause", []step{
			{0, "fail", false, false, Closed}, {0, "fail", false, false, Closed}, {0, "fail", false, false, Open},
			{2000, "admit", true, true, HalfOpen}, {2005, "fail", false, true, Open},
			{4004, "admit", false, false, Open}, {4005, "admit", true, true, HalfOpen},
		}},
		{"abandoned probe lets the next call probe", []step{
			{0, "fail", false, false, Closed}, {0, "fail", false, false, Closed}, {0, "fail", false, false, Open},
			{2000, "admit", true, true, HalfOpen}, {2001, "abandon", false, true, HalfOpen},
			{2002, "admit", true, true, HalfOpen},
		}},
		{"late answers of calls admitted before it opened change nothing", []step{
			{0, "fail", false, false, Closed}, {0, "fail", false, false, Closed}, {0, "fail", false, false, Open},
			{1, "ok", false, false, Open}, {2, "fail", false, false, Open},
			{2000, "admit", true, true, HalfOpen}, {2001, "ok", false, false, HalfOpen}, {2002, "fail", false, false, HalfOpen},
			{2003, "ok", false, true, Closed},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := breaker{tripAfter: 3, pause: 2 * time.Second}
			t0 := time.Unix(1_700_000_000, 0)
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(s.at) * time.Millisecond)
				switch s.op {
				case "admit":
					call, probe := b.admit(now)
					if call != s.call || probe != s.probe {
						t.Fatalf("step %d (admit at %dms): got call %v probe %v, want call %v probe %v", i, s.at, call, probe, s.call, s.probe)
					}
				case "ok":
					b.record(now, s.probe, nil)
				case "fail":
					b.record(now, s.probe, boom)
				case "abandon":
					b.abandon(s.probe)
				}
				if b.state != s.state {
					t.Fatalf("step %d (%s at %dms): got state %v, want %v", i, s.op, s.at, b.state, s.state)
				}
			}
		})
	}
}

func TestRetryIn(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := breaker{tripAfter: 1, pause: 2 * time.Second}
	b.record(t0, false, errors.New("boom"))
	for _, tc := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{0, 2 * time.Second},
		{1500 * time.Millisecond, 500 * time.Millisecond},
		{2 * time.Second, time.Millisecond},
		{time.Hour, time.Millisecond},
	} {
		if got := b.retryIn(t0.Add(tc.after)); got != tc.want {
			t.Errorf("%v after opening: got retry in %v, want %v", tc.after, got, tc.want)
		}
	}
}
