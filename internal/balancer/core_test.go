package balancer_test

import (
	"fmt"
	"slices"
	"strings"
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
		if _, err := c.Report(t0.Add(at), balancer.Report{Region: region, Gateway: gw, SpanMillis: 10_000, Total: total, Pairs: pairs}); err != nil {
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
		{Region: "us", Gateway: "g", SpanMillis: 1, Pairs: []balancer.PairReport{{Key: "k:" + strings.Repeat("x", balancer.MaxKeyLen), Limit: "s", Asked: 1}}},
		{Region: "us", Gateway: "g", SpanMillis: 1, Pairs: []balancer.PairReport{{Key: "k:a", Limit: strings.Repeat("L", 65), Asked: 1}}},
		{Region: "us", Gateway: "g", SpanMillis: 1, Pairs: []balancer.PairReport{{Key: "k:a", Limit: "per minute", Asked: 1}}},
		{Region: "us", Gateway: "g", SpanMillis: 1, Pairs: make([]balancer.PairReport, balancer.MaxPairsPerReport+1)},
	}
	for _, r := range bad {
		if _, err := c.Report(now, r); err == nil {
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
	if _, err := c.Report(now, balancer.Report{Region: "us", Gateway: "g", SpanMillis: 1000, Total: 10, Pairs: pairs}); err != nil {
		t.Fatal(err)
	}
	p := c.Rebalance(now)
	if _, ok := p.Pairs[share.Pair{Key: "k:a", Limit: "s"}]; ok || len(p.Pairs) != 2 {
		t.Errorf("got %d pairs (k:a kept: %v), want the 2 busiest", len(p.Pairs), ok)
	}
	// Among equally busy pairs at the cut, the first keys are kept,
	// whatever the order of the reports.
	for range 5 {
		c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us"}, MaxKeys: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range []string{"k:d", "k:c", "k:b", "k:a"} {
			rep := balancer.Report{Region: "us", Gateway: k, SpanMillis: 1000, Total: 10, Pairs: []balancer.PairReport{{Key: k, Limit: "s", Asked: min(int64(i+1), 2)}}}
			if _, err := c.Report(now, rep); err != nil {
				t.Fatal(err)
			}
		}
		p := c.Rebalance(now)
		_, b := p.Pairs[share.Pair{Key: "k:b", Limit: "s"}]
		_, a := p.Pairs[share.Pair{Key: "k:a", Limit: "s"}]
		if !a || !b || len(p.Pairs) != 2 {
			t.Fatalf("got %d pairs (k:a %v, k:b %v), want k:a and k:b of the three asking 2", len(p.Pairs), a, b)
		}
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
		return balancer.Report{Region: "us", Gateway: "g", SpanMillis: 1000, SentMillis: sent, Total: 100,
			Pairs: []balancer.PairReport{{Key: "k:a", Limit: "s", Asked: asked}}}
	}
	for _, r := range []balancer.Report{rep(2000, 7), rep(1000, 99)} {
		if _, err := c.Report(now, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Rebalance(now).Pairs[share.Pair{Key: "k:a", Limit: "s"}].Demand[0]; got != 7 {
		t.Errorf("got demand %v, want 7 from the later report", got)
	}
	// A report stamped ahead of the balancer's clock, within the skew
	// allowed, counts as sent when it arrived: the gateway's next report,
	// sent a second later, replaces it.
	now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, r := range []balancer.Report{rep(now.Add(25*time.Second).UnixMilli(), 99), rep(now.Add(time.Second).UnixMilli(), 7)} {
		tk, err := c.Report(now.Add(time.Duration(i)*time.Second), r)
		if err != nil || tk.Overtaken {
			t.Fatalf("report %d: got %+v, %v, want it taken", i, tk, err)
		}
	}
	if got := c.Rebalance(now.Add(time.Second)).Pairs[share.Pair{Key: "k:a", Limit: "s"}].Demand[0]; got != 7 {
		t.Errorf("got demand %v, want 7 from the report sent after the one stamped ahead arrived", got)
	}
}

// TestCoreMaxGateways checks that a region's gateways beyond MaxGateways
// are refused, so distinct gateway IDs cannot make the balancer hold
// reports without bound, and that a gateway silent for DownAfter frees its
// place.
func TestCoreMaxGateways(t *testing.T) {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu"}, MaxGateways: 2, DownAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rep := func(region, gw string, at time.Time) error {
		_, err := c.Report(at, balancer.Report{Region: region, Gateway: gw, SpanMillis: 1000, Total: 1})
		return err
	}
	for _, gw := range []string{"us-1", "us-2"} {
		if err := rep("us", gw, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := rep("us", "us-1", now); err != nil {
		t.Errorf("a known gateway's next report: got %v, want it taken", err)
	}
	if err := rep("us", "us-3", now); err == nil || !strings.Contains(err.Error(), "already has 2 gateways") {
		t.Errorf("a third gateway in us: got %v, want an error naming the limit of 2", err)
	}
	if err := rep("eu", "eu-1", now); err != nil {
		t.Errorf("eu's first gateway: got %v, want it taken (the bound is per region)", err)
	}
	later := now.Add(2 * time.Minute)
	if err := rep("us", "us-1", later); err != nil {
		t.Fatal(err)
	}
	c.Rebalance(later) // forgets us-2, silent for DownAfter
	if err := rep("us", "us-3", later); err != nil {
		t.Errorf("a new gateway once another went silent: got %v, want it taken", err)
	}
}

// BenchmarkRebalanceMaxKeys rebalances more pairs than MaxKeys, so that the
// busiest are sorted out: 3 regions of 20 gateways, each reporting 1100
// pairs of which 1000 are shared.
func BenchmarkRebalanceMaxKeys(b *testing.B) {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu", "ap"}, MaxKeys: 1000})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, r := range []string{"us", "eu", "ap"} {
		for g := range 20 {
			var ps []balancer.PairReport
			for i := range 1000 {
				ps = append(ps, balancer.PairReport{Key: fmt.Sprintf("k:key_%05d", i), Limit: "s", Asked: int64(i%97 + g)})
			}
			for i := range 100 {
				ps = append(ps, balancer.PairReport{Key: fmt.Sprintf("k:%s-%d-%d", r, g, i), Limit: "s", Asked: 5})
			}
			if _, err := c.Report(now, balancer.Report{Region: r, Gateway: fmt.Sprint(g), SpanMillis: 10_000, Total: 1e6, Pairs: ps}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Rebalance(now)
	}
}
