package balancer_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/share"
)

// TestCoreClampsImplausibleReports checks that a report's counts are cut
// to what one gateway can have seen, and that a report sent further ahead
// of the balancer's clock than MaxSkew is refused.
func TestCoreClampsImplausibleReports(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu"}, MaxGatewayRate: 1000, MaxSkew: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pair := func(asked int64) []balancer.PairReport {
		return []balancer.PairReport{{Key: "k:a", Limit: "s", Asked: asked, Admitted: asked}}
	}
	tests := []struct {
		name       string
		rep        balancer.Report
		clamped    []string
		total, ask float64 // tokens a second the plan then counts
	}{
		{"plausible", balancer.Report{Region: "us", Gateway: "g1", SpanMillis: 10_000, Total: 5000, Pairs: pair(3000)}, nil, 500, 300},
		{"above the gateway rate", balancer.Report{Region: "eu", Gateway: "g2", SpanMillis: 10_000, Total: 1e15, Pairs: pair(5e14)},
			[]string{balancer.ReasonRate}, 1000, 500},
		{"a pair above the total", balancer.Report{Region: "eu", Gateway: "g2", SpanMillis: 10_000, Total: 100, Pairs: pair(1e12)},
			[]string{balancer.ReasonPair}, 10, 10},
		{"both", balancer.Report{Region: "eu", Gateway: "g2", SpanMillis: 1000, Total: 1e9, Pairs: pair(1e15)},
			[]string{balancer.ReasonRate, balancer.ReasonPair}, 1000, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := c.Report(now, tt.rep)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(tk.Clamped) != fmt.Sprint(tt.clamped) {
				t.Errorf("got clamped %v, want %v", tk.Clamped, tt.clamped)
			}
			p := c.Rebalance(now)
			i := map[string]int{"us": 0, "eu": 1}[tt.rep.Region]
			if got := p.Totals[i]; got != tt.total {
				t.Errorf("got %s's total %v a second, want %v", tt.rep.Region, got, tt.total)
			}
			if got := p.Pairs[share.Pair{Key: "k:a", Limit: "s"}].Demand[i]; got != tt.ask {
				t.Errorf("got %s's demand for k:a %v a second, want %v", tt.rep.Region, got, tt.ask)
			}
		})
	}
	for _, tt := range []struct {
		ahead time.Duration
		ok    bool
	}{{29 * time.Second, true}, {31 * time.Second, false}, {24 * time.Hour, false}, {-time.Hour, true}} {
		_, err := c.Report(now, balancer.Report{Region: "us", Gateway: fmt.Sprint("skew", tt.ahead), SpanMillis: 1000, SentMillis: now.Add(tt.ahead).UnixMilli()})
		var re *balancer.RefusedError
		if refused := errors.As(err, &re) && re.Reason == balancer.ReasonClock; refused == tt.ok {
			t.Errorf("a report sent %v ahead of the balancer's clock: got error %v, want refused %v", tt.ahead, err, !tt.ok)
		}
	}
}

// floodReport is one forged report of n pairs of distinct keys of keyLen
// bytes.
func floodReport(gateway string, n, keyLen int) balancer.Report {
	rep := balancer.Report{Region: "us", Gateway: gateway, SpanMillis: 10_000, Total: 2e6, Pairs: make([]balancer.PairReport, n)}
	prefix := "k:" + gateway + strings.Repeat("x", keyLen-2-len(gateway)-7)
	for i := range n {
		rep.Pairs[i] = balancer.PairReport{Key: fmt.Sprintf("%s%07d", prefix, i), Limit: "s", Asked: int64(1 + i%1000)}
	}
	return rep
}

// floodCore returns a Core fed the review's flood: 20 forged gateways, each
// reporting 20000 pairs of 250-byte keys (about 125 MB as ReportBytes
// counts them; the heap grew by 330 MB before the state had a bound). After
// each report it calls check, if not nil.
func floodCore(tb testing.TB, check func(g int, c *balancer.Core)) *balancer.Core {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu"}})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for g := range 20 {
		if _, err := c.Report(now, floodReport(fmt.Sprintf("f%02d", g), balancer.MaxPairsPerReport, 250)); err != nil {
			tb.Fatal(err)
		}
		if check != nil {
			check(g, c)
		}
	}
	return c
}

// TestStateBoundUnderFlood feeds the flood to a Core of the default
// bound: the state it keeps must stay within DefaultMaxStateBytes, exactly
// as counted, after every report; the heap must grow by no more than a
// generous multiple of it; and a rebalance then balances at most MaxKeys
// pairs, the busiest.
func TestStateBoundUnderFlood(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := floodCore(t, func(g int, c *balancer.Core) {
		if got := c.StateBytes(); got > balancer.DefaultMaxStateBytes {
			t.Fatalf("after report %d: state %d bytes, above the bound %d", g, got, balancer.DefaultMaxStateBytes)
		}
	})
	start := time.Now()
	p := c.Rebalance(time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC))
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("flood: state %.1f MB as counted (bound %d MB); heap grew %.1f MB; a rebalance took %v and balanced %d pairs",
		float64(c.StateBytes())/(1<<20), balancer.DefaultMaxStateBytes>>20, float64(grown)/(1<<20), took.Round(time.Millisecond), len(p.Pairs))
	if grown > 3*balancer.DefaultMaxStateBytes {
		t.Errorf("heap grew %d MB under the flood, want at most 3 times the %d MB bound", grown>>20, balancer.DefaultMaxStateBytes>>20)
	}
	if len(p.Pairs) != 10000 {
		t.Errorf("a rebalance balanced %d pairs, want MaxKeys (10000)", len(p.Pairs))
	}
	// The busiest were kept: each gateway asked 1 to 1000 of its pairs
	// over 10 s, 400 pairs of each count: the top 10000 asked at least 975.
	for k, pp := range p.Pairs {
		if pp.Demand[0] < 97.5 {
			t.Errorf("kept %s with demand %v, want only the busiest", k.Key[:12], pp.Demand[0])
			break
		}
	}
	runtime.KeepAlive(c)
}

// BenchmarkRebalanceFlood rebalances a state filled to its bound by the
// flood (some 150000 distinct pairs, cut to MaxKeys).
func BenchmarkRebalanceFlood(b *testing.B) {
	c := floodCore(b, nil)
	now := time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		c.Rebalance(now)
	}
}
