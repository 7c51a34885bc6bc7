package balancer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/share"
)

func TestSplit(t *testing.T) {
	all := []bool{true, true, true}
	tests := []struct {
		name    string
		weights []float64
		up      []bool
		min     uint32
		want    []uint32
	}{
		{"proportional", []float64{60, 30, 10}, all, 50_000, []uint32{600_000, 300_000, 100_000}},
		{"minimum holds", []float64{100, 0, 0}, all, 50_000, []uint32{900_000, 50_000, 50_000}},
		{"minimum, rest proportional", []float64{97, 2, 1}, all, 50_000, []uint32{900_000, 50_000, 50_000}},
		{"one small", []float64{60, 38, 2}, all, 50_000, []uint32{581_632, 368_367, 50_000}},
		{"no traffic splits evenly", []float64{0, 0, 0}, all, 50_000, []uint32{333_333, 333_333, 333_333}},
		{"down gets nothing", []float64{10, 10, 80}, []bool{true, true, false}, 50_000, []uint32{500_000, 500_000, 0}},
		{"all down", []float64{1, 1, 1}, []bool{false, false, false}, 50_000, []uint32{0, 0, 0}},
		{"minimum above an even split", []float64{1, 0, 0}, all, 500_000, []uint32{333_334, 333_333, 333_333}},
		{"negative weight is none", []float64{-5, 10, 0}, []bool{true, true, false}, 0, []uint32{0, 1_000_000, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := balancer.Split(tt.weights, tt.up, tt.min)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			var sum uint64
			for _, s := range got {
				sum += uint64(s)
			}
			if sum > share.Whole {
				t.Errorf("shares add up to %d, above the whole", sum)
			}
		})
	}
}

func FuzzSplit(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, uint32(50_000), true, true, false)
	f.Fuzz(func(t *testing.T, a, b, c float64, m uint32, ua, ub, uc bool) {
		got := balancer.Split([]float64{a, b, c}, []bool{ua, ub, uc}, m%(share.Whole+1))
		var sum uint64
		for i, s := range got {
			sum += uint64(s)
			if up := []bool{ua, ub, uc}[i]; !up && s != 0 {
				t.Errorf("region %d is down but got %d", i, s)
			}
		}
		if sum > share.Whole {
			t.Errorf("weights %v %v %v: shares %v add up to %d, above the whole", a, b, c, got, sum)
		}
	})
}

func TestCoreRebalance(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu", "ap"}, DownAfter: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	report := func(at time.Duration, region, gw string, total int64, pairs ...balancer.PairReport) {
		t.Helper()
		if err := c.Report(t0.Add(at), balancer.Report{Region: region, Gateway: gw, SpanMillis: 10_000, Total: total, Pairs: pairs}); err != nil {
			t.Fatal(err)
		}
	}
	busy := func(asked int64) balancer.PairReport {
		return balancer.PairReport{Key: "k:a", Limit: "s", Asked: asked, Admitted: asked}
	}
	report(0, "us", "us-1", 3000, busy(300))
	report(0, "us", "us-2", 3000, busy(300)) // two gateways of one region add up
	report(0, "eu", "eu-1", 3000, busy(300))
	report(0, "ap", "ap-1", 1000)
	p := c.Rebalance(t0.Add(time.Second))
	pa := p.Pairs[share.Pair{Key: "k:a", Limit: "s"}]
	if want := []uint32{633_333, 316_666, 50_000}; pa == nil || !slices.Equal(pa.Shares, want) {
		t.Fatalf("got %+v, want shares %v", pa, want)
	}
	if want := []uint32{600_000, 300_000, 100_000}; !slices.Equal(p.Defaults, want) {
		t.Errorf("got defaults %v, want %v (traffic proportions)", p.Defaults, want)
	}
	// eu stops reporting: after DownAfter it is down and its shares move.
	report(20*time.Second, "us", "us-1", 3000, busy(300))
	report(20*time.Second, "ap", "ap-1", 1000)
	p = c.Rebalance(t0.Add(31 * time.Second))
	if want := []bool{true, false, true}; !slices.Equal(p.Up, want) {
		t.Fatalf("got up %v, want %v", p.Up, want)
	}
	if want := []uint32{950_000, 0, 50_000}; !slices.Equal(p.Pairs[share.Pair{Key: "k:a", Limit: "s"}].Shares, want) {
		t.Errorf("got shares %v with eu down, want %v", p.Pairs[share.Pair{Key: "k:a", Limit: "s"}].Shares, want)
	}
	if want := []uint32{750_000, 0, 250_000}; !slices.Equal(p.Defaults, want) {
		t.Errorf("got defaults %v with eu down, want %v", p.Defaults, want)
	}
	// No region left: nothing to base shares on.
	if p := c.Rebalance(t0.Add(time.Hour)); p != nil {
		t.Errorf("got a plan %+v with every region down, want nil", p)
	}
}

func TestCoreRefuses(t *testing.T) {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	bad := []balancer.Report{
		{Region: "mars", Gateway: "g", SpanMillis: 1},
		{Region: "us", Gateway: "", SpanMillis: 1},
		{Region: "us", Gateway: "g", SpanMillis: 0},
		{Region: "us", Gateway: "g", SpanMillis: 1, Pairs: []balancer.PairReport{{Key: "k", Limit: "s", Asked: 1, Admitted: 2}}},
		{Region: "us", Gateway: "g", SpanMillis: 1, Pairs: []balancer.PairReport{{Key: "k\xff", Limit: "s", Asked: 1}}},
	}
	for _, r := range bad {
		if err := c.Report(now, r); err == nil {
			t.Errorf("got no error for report %+v", r)
		}
	}
	for _, cfg := range []balancer.CoreConfig{{}, {Regions: []string{"us", "us"}}, {Regions: []string{"us"}, MinShare: share.Whole + 1}} {
		if _, err := balancer.NewCore(cfg); err == nil {
			t.Errorf("got no error for config %+v", cfg)
		}
	}
}

func TestCoreMaxKeys(t *testing.T) {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us"}, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var pairs []balancer.PairReport
	for i, k := range []string{"k:a", "k:b", "k:c"} {
		pairs = append(pairs, balancer.PairReport{Key: k, Limit: "s", Asked: int64(i + 1)})
	}
	if err := c.Report(now, balancer.Report{Region: "us", Gateway: "g", SpanMillis: 1000, Pairs: pairs}); err != nil {
		t.Fatal(err)
	}
	p := c.Rebalance(now)
	if _, ok := p.Pairs[share.Pair{Key: "k:a", Limit: "s"}]; ok || len(p.Pairs) != 2 {
		t.Errorf("got %d pairs (k:a kept: %v), want the 2 busiest", len(p.Pairs), ok)
	}
}

// TestCoreDropsOvertakenReports checks that a report arriving after a
// later one from the same gateway does not replace it.
func TestCoreDropsOvertakenReports(t *testing.T) {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep := func(sent, asked int64) balancer.Report {
		return balancer.Report{Region: "us", Gateway: "g", SpanMillis: 1000, SentMillis: sent,
			Pairs: []balancer.PairReport{{Key: "k:a", Limit: "s", Asked: asked}}}
	}
	for _, r := range []balancer.Report{rep(2000, 7), rep(1000, 99)} {
		if err := c.Report(now, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Rebalance(now).Pairs[share.Pair{Key: "k:a", Limit: "s"}].Demand[0]; got != 7 {
		t.Errorf("got demand %v, want 7 from the later report", got)
	}
}
