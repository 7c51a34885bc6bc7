package regions

import (
	"testing"
	"time"
)

// tolerance is what the global check allows above burst + rate × elapsed,
// as a fraction of one second's rate: each region's leases may hold up to
// 1.5 batches of 100 ms of its share's rate taken before the bucket
// refilled (0.15 of the whole rate across regions; see package lease), and
// for the moments between two regions swapping in one new table (a few
// milliseconds on loopback; 50 ms allowed) a share can be counted in both.
const tolerance = 0.2

// TestTrafficMoves sends a client's traffic to us, then moves it to eu, at
// three times its limit throughout. The global admitted count must never
// exceed the global allowance, and eu must come to hold most of the share;
// the test reports how long that took and how much of its limit the client
// got after the move.
func TestTrafficMoves(t *testing.T) {
	const rate, burst = 100, 50
	w := newWorld(t, time.Minute, nil, rule{"mover", rate, burst})
	tr := newTraffic()
	stopUS, stopEU := make(chan struct{}), make(chan struct{})
	tr.flow(stopUS, func() string { return w.gateways[0].URL }, 0, "mover", 3*rate)
	w.waitShares("mover", "us to hold most of the share", 10*time.Second, func(s []float64) bool { return s[0] > 0.8 })
	time.Sleep(time.Second)
	close(stopUS)
	moved := time.Now()
	tr.flow(stopEU, func() string { return w.gateways[1].URL }, 1, "mover", 3*rate)
	took := w.waitShares("mover", "eu to hold most of the share", 10*time.Second, func(s []float64) bool { return s[1] > 0.5 })
	w.waitShares("mover", "eu to hold 90% of the share", 10*time.Second, func(s []float64) bool { return s[1] >= 0.9 })
	settled := time.Now()
	time.Sleep(2 * time.Second)
	close(stopEU)
	tr.wait()
	hs := tr.of("mover")
	worst := checkGlobal(t, hs, rate, burst, tolerance*rate)
	got := admitted(hs, 1, settled, settled.Add(2*time.Second))
	t.Logf("eu held most of the share %v after the move (interval %v); admitted at most %.1f above burst + rate × elapsed (tolerance %.0f); "+
		"after the move %d of %d (%.0f%%) of the limit in 2s; answers %v",
		took.Round(10*time.Millisecond), interval, worst, tolerance*rate, got, 2*rate, 100*float64(got)/(2*rate), statuses(hs))
	if got < rate { // the share the balancer gives eu is 90%
		t.Errorf("after the move eu admitted %d in 2s, want most of its 90%% share of %d a second", got, rate)
	}
	if n := admitted(hs, 1, moved, settled); n == 0 {
		t.Error("eu admitted nothing while its share grew: its minimum share should absorb the first requests")
	}
}
