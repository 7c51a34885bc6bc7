package rulesvc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	c := Canary{Threshold: 0.05, MinSample: 100}
	tests := []struct {
		name         string
		canary, rest Side
		windowOver   bool
		want         verdict
		wantWhy      string
		wantCompared bool
	}{
		{"too few canary requests", Side{50, 50}, Side{1000, 0}, false, keepGoing, "", false},
		{"too few requests elsewhere", Side{1000, 900}, Side{99, 0}, false, keepGoing, "", false},
		{"canary refuses much more", Side{200, 40}, Side{1000, 50}, false, halt, "canary refused 0.2000 of requests (40 of 200), the rest 0.0500 (50 of 1000)", true},
		{"halts even once the window is over", Side{200, 40}, Side{1000, 50}, true, halt, "more than 0.0500 higher", true},
		{"within the threshold", Side{1000, 90}, Side{1000, 50}, false, keepGoing, "", true},
		{"exactly the threshold", Side{1000, 100}, Side{1000, 50}, false, keepGoing, "", true},
		{"canary refuses less", Side{1000, 0}, Side{1000, 500}, true, promote, "canary window over: canary refused", true},
		// Promoted, since the window is over, but never silently.
		{"no traffic at all", Side{}, Side{}, true, promote, "promoted WITHOUT COMPARISON: the canary reported 0 requests and the rest 0", false},
		{"nothing elsewhere", Side{1000, 1000}, Side{}, true, promote, "WITHOUT COMPARISON", false},
		{"saturated sums", Side{1<<63 - 1, 1<<63 - 1}, Side{1<<63 - 1, 0}, false, halt, "canary refused 1.0000", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, compared := judge(tt.canary, tt.rest, c, tt.windowOver)
			if got != tt.want || !strings.Contains(why, tt.wantWhy) || compared != tt.wantCompared {
				t.Errorf("got verdict %d %q compared %v, want %d containing %q, compared %v", got, why, compared,
					tt.want, tt.wantWhy, tt.wantCompared)
			}
		})
	}
}

func TestChooseCanaries(t *testing.T) {
	fleet := func(n int) []string {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("gw-%03d", i))
		}
		return ids
	}
	tests := []struct {
		gateways int
		fraction float64
		want     int
	}{
		{0, 0.01, 0}, {1, 0.01, 1}, {3, 0.01, 1}, {100, 0.01, 1}, {101, 0.01, 2}, {330, 0.01, 4}, {4, 0.25, 1}, {4, 1, 4},
	}
	for _, tt := range tests {
		got := chooseCanaries(fleet(tt.gateways), 7, tt.fraction)
		if len(got) != tt.want {
			t.Errorf("%d gateways at %v: got %d canaries, want %d", tt.gateways, tt.fraction, len(got), tt.want)
		}
	}
	// Stable for a version whatever the order the gateways are listed in,
	// and spread over the fleet across versions.
	ids := fleet(50)
	first := chooseCanaries(ids, 7, 0.01)
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	if again := chooseCanaries(rev, 7, 0.01); !slices.Equal(first, again) {
		t.Errorf("version 7: got canaries %v, then %v from the same fleet", first, again)
	}
	chosen := map[string]bool{}
	for v := range int64(50) {
		chosen[chooseCanaries(ids, v, 0.01)[0]] = true
	}
	if len(chosen) < 10 {
		t.Errorf("50 versions chose only %d distinct canaries of 50 gateways, want them spread", len(chosen))
	}
}
