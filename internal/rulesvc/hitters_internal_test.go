package rulesvc

import (
	"fmt"
	"testing"
	"time"
)

// TestSpaceSaving feeds a summary a stream where a few keys are heavy
// among many light ones: the heavy keys are always in it, with counts no
// lower than their true ones and over by at most what they say, and it
// never holds more than hitterSlots keys.
func TestSpaceSaving(t *testing.T) {
	at := time.Unix(0, 0)
	tests := []struct {
		name   string
		heavy  map[string]int64
		light  int // distinct keys refused once each
		rounds int // the stream interleaves heavy and light keys this often
	}{
		{"fits", map[string]int64{"k:a": 5}, 10, 1},
		{"heavy among a flood", map[string]int64{"k:a": 400, "k:b": 300, "ip:c": 200}, 5000, 100},
		{"flood only", nil, 10000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s summary
			truth := map[string]int64{}
			light := 0
			for r := range tt.rounds {
				for k, n := range tt.heavy {
					per := n / int64(tt.rounds)
					if r == tt.rounds-1 {
						per = n - per*int64(tt.rounds-1)
					}
					for range per {
						s.add(k, "s", 1, at)
						truth[k]++
					}
				}
				for ; light < tt.light*(r+1)/tt.rounds; light++ {
					k := fmt.Sprintf("k:light%d", light)
					s.add(k, "s", 1, at)
					truth[k]++
				}
			}
			if len(s.slots) > hitterSlots {
				t.Fatalf("got %d slots, want at most %d", len(s.slots), hitterSlots)
			}
			var total int64
			for _, n := range truth {
				total += n
			}
			if s.total != total {
				t.Errorf("got total %d, want %d", s.total, total)
			}
			in := map[string]hitter{}
			for _, h := range s.slots {
				in[h.key] = h
				if h.count < truth[h.key] || h.count-h.over > truth[h.key] {
					t.Errorf("%s: got count %d over %d, want between %d and %d+over", h.key, h.count, h.over, truth[h.key], truth[h.key])
				}
			}
			for k, n := range tt.heavy {
				if n > total/hitterSlots {
					if _, ok := in[k]; !ok {
						t.Errorf("%s: refused %d of %d times, more than 1/%d, but not in the summary", k, n, total, hitterSlots)
					}
				}
			}
		})
	}
}

// TestRefusalsBounded checks that the rule versions kept are bounded, the
// oldest version dropped first, and that last finds a key's newest
// refusal across rules.
func TestRefusalsBounded(t *testing.T) {
	r := newRefusals()
	at := time.Unix(100, 0)
	for v := range int64(hitterRules + 10) {
		r.add(ruleVersion{rule: 1, version: v + 1}, "k:a", "s", 1, at.Add(time.Duration(v)*time.Second))
	}
	if got := len(r.rules); got != hitterRules {
		t.Errorf("got %d rule versions, want %d", got, hitterRules)
	}
	if _, ok := r.rules[ruleVersion{1, 1}]; ok {
		t.Errorf("version 1, the oldest, is still kept")
	}
	last := r.last("k:a")
	if last == nil || last.RulesVersion != hitterRules+10 || last.Rule != 1 {
		t.Errorf("got last refusal %+v, want rule 1 of version %d", last, hitterRules+10)
	}
	if r.last("k:b") != nil {
		t.Errorf("got a last refusal of a key never refused")
	}
	if top := r.top(10); len(top) != hitterRules || top[0].RulesVersion != hitterRules+10 {
		t.Errorf("got %d rules, first version %d, want %d, newest first", len(top), top[0].RulesVersion, hitterRules+10)
	}
}
