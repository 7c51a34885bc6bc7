package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// shortFleet runs scs briefly against srv in every mode.
func shortFleet(t *testing.T, target bench.Target, scs []bench.Scenario) *bench.Report {
	t.Helper()
	rep, err := bench.RunFleet(context.Background(), bench.FleetConfig{Target: target, Gateways: 3, Workers: 4,
		Duration: 1200 * time.Millisecond, Rate: 400, Bins: 12, MaxErrorRate: 0.05}, scs)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestFleetComparesModesOnTheSameTraffic(t *testing.T) {
	srv := redistest.Standalone(t)
	scs, err := bench.SelectScenarios(bench.Scenarios(400), "storm,lower")
	if err != nil {
		t.Fatal(err)
	}
	rep := shortFleet(t, bench.Target{Addrs: []string{srv.Addr()}, Standalone: srv}, scs)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 2 {
		t.Fatalf("got %d scenarios, want 2", len(rep.Scenarios))
	}
	for _, s := range rep.Scenarios {
		if len(s.Modes) != len(bench.Modes) {
			t.Fatalf("%s: got %d modes, want %d", s.Name, len(s.Modes), len(bench.Modes))
		}
		for _, m := range s.Modes {
			if m.Requests == 0 || m.RedisCalls == 0 {
				t.Errorf("%s %s: %d requests, %d Redis calls: want both counted", s.Name, m.Mode, m.Requests, m.RedisCalls)
			}
			if m.Admitted > m.Requests || m.Exact > m.Requests {
				t.Errorf("%s %s: %d admitted, %d exact of %d requests", s.Name, m.Mode, m.Admitted, m.Exact, m.Requests)
			}
			if n := len(m.Timeline.FocusAdmitted); n != 12 || len(m.Timeline.Calls) != n || len(m.Timeline.FocusLimit) != n {
				t.Errorf("%s %s: timeline of %d bins, want 12 in every series", s.Name, m.Mode, n)
			}
		}
	}
	storm := rep.Scenarios[0]
	perRequest, cached := storm.Modes[0], storm.Modes[2]
	if perRequest.CallsPerRequest < 0.5 {
		t.Errorf("storm, per-request: %.3f calls a request, want about 1", perRequest.CallsPerRequest)
	}
	if cached.CallsPerRequest*5 > perRequest.CallsPerRequest {
		t.Errorf("storm: refusal cache %.3f calls a request against %.3f per request: want at least 5 times fewer",
			cached.CallsPerRequest, perRequest.CallsPerRequest)
	}
	lower := rep.Scenarios[1].Modes[0]
	if len(lower.Events) != 1 || !strings.Contains(lower.Events[0].What, "lowered") {
		t.Errorf("lower: events %v, want the limit lowered once", lower.Events)
	}
	if tl := lower.Timeline.FocusLimit; int64(tl[0])/4 != int64(tl[len(tl)-1]) {
		t.Errorf("lower: focus limit %v, want a quarter at the end", tl)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "leases+cache") {
		t.Errorf("table %q, %v: want a row per mode", b.String(), err)
	}
}

func TestFleetRefusesWhatItCannotDo(t *testing.T) {
	tests := []struct {
		name, scenarios, want string
		target                bench.Target
	}{
		{"pause needs a server the run started", "pause", "--local", bench.Target{Addrs: []string{"127.0.0.1:6379"}}},
		{"outage needs a cluster the run started", "outage", "--local", bench.Target{Addrs: []string{"127.0.0.1:6379"}}},
		{"no address", "steady", "no Redis address", bench.Target{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scs, err := bench.SelectScenarios(bench.Scenarios(100), tt.scenarios)
			if err != nil {
				t.Fatal(err)
			}
			_, err = bench.RunFleet(context.Background(), bench.FleetConfig{Target: tt.target}, scs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
	if _, err := bench.SelectScenarios(bench.Scenarios(100), "steady,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown scenario: got %v, want it named", err)
	}
	if _, err := bench.ParseModes("leases,fast"); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("unknown mode: got %v, want it named", err)
	}
}

func TestLoopback(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:6379", true}, {"localhost:6379", true}, {"[::1]:6379", true},
		{"10.0.0.1:6379", false}, {"redis.example:6379", false}, {"nohost", false},
	}
	for _, tt := range tests {
		if err := bench.Loopback([]string{tt.addr}); (err == nil) != tt.ok {
			t.Errorf("Loopback(%s) = %v, want ok %v", tt.addr, err, tt.ok)
		}
	}
}

func TestFleetRegionsFollowTraffic(t *testing.T) {
	srv := redistest.Standalone(t)
	scs, err := bench.SelectScenarios(bench.Scenarios(400), "regions")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.RunFleet(context.Background(), bench.FleetConfig{Target: bench.Target{Addrs: []string{srv.Addr()}},
		Gateways: 4, Workers: 4, Duration: 3 * time.Second, Rate: 400, Modes: []bench.Mode{bench.LeasesCache}}, scs)
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Scenarios[0].Modes[0]
	if len(m.Events) == 0 || m.Events[0].What != "traffic moved to west" {
		t.Fatalf("events %v, want the traffic moved to west first", m.Events)
	}
	// Shares add up to the limit: the regions together are never over
	// it, beyond what leases may hold at an instant.
	if m.OverPct > 1 {
		t.Errorf("regions: %.2f%% over the global limit, want at most 1%%", m.OverPct)
	}
	if m.ErrorCount() > 0 {
		t.Errorf("regions: errors %v (%v)", m.Errors, m.FirstErrors)
	}
}
