package rulesvc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	c := Canary{Threshold: 0.05, MinSample: 100, MinGateways: 3}
	// gws is a side of gateways, each reporting requests and refused.
	gws := func(counts ...int64) Side {
		var out []gatewayCounts
		for i := 0; i+1 < len(counts); i += 2 {
			out = append(out, gatewayCounts{gateway: fmt.Sprint("gw-", i), requests: counts[i], refused: counts[i+1]})
		}
		return sideOf(out, c.MinSample)
	}
	const huge = 1 << 40
	tests := []struct {
		name         string
		canary, rest Side
		windowOver   bool
		mayWait      bool
		want         verdict
		wantWhy      string
		wantCompared bool
	}{
		{"too few canary requests", gws(50, 50), gws(1000, 0, 1000, 0), false, false, keepGoing, "", false},
		{"too few requests elsewhere", gws(1000, 900), gws(60, 0, 39, 0), false, false, keepGoing, "", false},
		{"too few gateways", gws(1000, 900), gws(1000, 0), false, false, keepGoing, "", false},
		{"canary refuses much more", gws(200, 40), gws(1000, 50, 1000, 50), false, false, halt,
			"canary refused 0.2000 of requests (40 of 200, 1 gateways), the rest 0.0500 (100 of 2000, 2 gateways)", true},
		{"halts even once the window is over", gws(200, 40), gws(1000, 50, 1000, 50), true, false, halt, "more than 0.0500 higher", true},
		{"within the threshold", gws(1000, 90), gws(1000, 50, 1000, 50), false, false, keepGoing, "", true},
		{"exactly the threshold", gws(1000, 100), gws(1000, 50, 1000, 50), false, false, keepGoing, "", true},
		{"canary refuses less", gws(1000, 0), gws(1000, 500, 1000, 500), true, false, promote, "canary window over: canary refused", true},
		// Promoted, since the window is over, but never silently.
		{"no traffic at all", gws(), gws(), true, false, promote, "promoted WITHOUT COMPARISON: canary refused 0.0000 of requests (0 of 0, 0 gateways)", false},
		{"nothing elsewhere", gws(1000, 1000), gws(), true, false, promote, "WITHOUT COMPARISON", false},
		// Too few samples at the window's end: wait for them while the
		// service says waiting may help.
		{"waits for samples", gws(50, 0), gws(1000, 0, 1000, 0), true, true, keepGoing, "", false},
		{"does not wait once compared", gws(1000, 0), gws(1000, 0, 1000, 0), true, true, promote, "canary window over", true},
		// Issue 21: two made-up gateways claiming 2^40 requests, all
		// refused, weigh as two gateways, not as the fleet: the canary
		// refusing nearly everything is still halted.
		{"two loud gateways cannot hide a bad canary", gws(1000, 990), gws(1000, 0, 1000, 0, 1000, 0, huge, huge, huge, huge), false, false, halt,
			"more than 0.0500 higher", true},
		// And claiming nothing refused cannot halt a canary that refuses
		// as much as the real rest.
		{"two quiet gateways cannot halt a good canary", gws(1000, 20), gws(1000, 20, 1000, 20, 1000, 20, huge, 0, huge, 0), true, false, promote,
			"canary window over", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, compared := judge(tt.canary, tt.rest, c, tt.windowOver, tt.mayWait)
			if got != tt.want || !strings.Contains(why, tt.wantWhy) || compared != tt.wantCompared {
				t.Errorf("got verdict %d %q compared %v, want %d containing %q, compared %v", got, why, compared,
					tt.want, tt.wantWhy, tt.wantCompared)
			}
		})
	}
}

func TestSideWeighsGatewaysEqually(t *testing.T) {
	s := sideOf([]gatewayCounts{{requests: 1 << 40, refused: 1 << 40}, {requests: 5000}, {requests: 50, refused: 50}, {}}, 1000)
	// Weights 1000, 1000 and 50; rates 1, 0 and 1.
	if want := 1050.0 / 2050; s.Rate != want || s.Gateways != 3 || s.Requests != 1<<40+5050 {
		t.Errorf("got rate %v over %d gateways, %d requests; want %v over 3, %d", s.Rate, s.Gateways, s.Requests, want, int64(1<<40+5050))
	}
	sat := sideOf([]gatewayCounts{{requests: 1<<63 - 1, refused: 1}, {requests: 1<<63 - 1}}, 1000)
	if sat.Requests != 1<<63-1 {
		t.Errorf("got %d requests, want the sum saturated at %d", sat.Requests, int64(1<<63-1))
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
