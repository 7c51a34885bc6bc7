package rls_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rls"
)

// A detailed_metric descriptor makes at most rls.MaxDetailedSeries
// descriptor labels in a domain; further values count under one overflow
// label, and values already seen keep their own.
func TestDetailedMetricSeriesAreBounded(t *testing.T) {
	s := serve(t, `
domain: m
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: plan
    rate_limit: {unit: hour, requests_per_unit: 1000}
`, memstore.New(memstore.Config{}))
	extra := 7
	for i := range rls.MaxDetailedSeries + extra {
		s.ask(t, "m", 1, desc("user", fmt.Sprint("u", i)))
	}
	s.ask(t, "m", 1, desc("user", "u0"))                        // seen: its own series
	s.ask(t, "m", 1, desc("user", "u_late"))                    // not seen: the overflow
	s.ask(t, "m", 1, desc("plan", "pro"), desc("plan", "free")) // not detailed: one series

	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	users := 0
	for _, mf := range mfs {
		if mf.GetName() != "sluice_rls_total_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "descriptor" && strings.HasPrefix(lp.GetValue(), "user_") {
					users++
				}
			}
		}
	}
	if want := rls.MaxDetailedSeries + 1; users != want {
		t.Errorf("total_hits series of user: got %d, want %d (the bound and the overflow)", users, want)
	}
	for _, tt := range []struct {
		descriptor string
		want       float64
	}{
		{"user_u0", 2},
		{"user" + rls.OverflowSuffix, float64(extra + 1)},
		{"plan", 2},
	} {
		if got := s.counter(t, "sluice_rls_total_hits_total", "m", tt.descriptor); got != tt.want {
			t.Errorf("total_hits of %q: got %v, want %v", tt.descriptor, got, tt.want)
		}
	}
}
