package regions

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// tolerance is what the global check allows above burst + rate × elapsed,
// as a fraction of one second's rate: each region's leases may hold up to
// 1.5 batches of 100 ms of its share's rate taken before the bucket
// refilled (0.15 of the whole rate across regions; see package lease), and
// for the moments between two regions swapping in one new table (a few
// milliseconds on loopback; 50 ms allowed) a share can be counted in both.
const tolerance = 0.2

// move is what moveTraffic measured.
type move struct {
	balancer time.Duration // from the move until the balancer gave eu most of the share
	gateway  time.Duration // until eu's gateway enforced that share
	got      int           // admitted in eu over the 2 s after its share reached 90%
	hits     []hit
}

// moveTraffic sends a key's traffic to us at three times its limit until
// us holds most of its share, then moves it to eu, and measures how long
// eu takes to get most of the share, at the balancer and at eu's gateway.
func moveTraffic(t *testing.T, w *world, key string, rate int) move {
	tr := newTraffic()
	stopUS, stopEU := make(chan struct{}), make(chan struct{})
	tr.flow(stopUS, func() string { return w.gateways[0].URL }, 0, key, 3*rate)
	w.waitShares(key, "us to hold most of the share", 20*time.Second, func(s []float64) bool { return s[0] > 0.8 })
	time.Sleep(time.Second)
	close(stopUS)
	moved := time.Now()
	tr.flow(stopEU, func() string { return w.gateways[1].URL }, 1, key, 3*rate)
	var m move
	var version int64
	m.balancer, version = w.waitShares(key, "eu to hold most of the share", 20*time.Second, func(s []float64) bool { return s[1] > 0.5 })
	w.waitGateway(1, float64(version))
	m.gateway = time.Since(moved)
	// 90% less what the balancer's hysteresis (1%) may leave with us.
	w.waitShares(key, "eu to hold 90% of the share", 20*time.Second, func(s []float64) bool { return s[1] >= 0.885 })
	settled := time.Now()
	time.Sleep(2 * time.Second)
	close(stopEU)
	tr.wait()
	m.hits = tr.of(key)
	m.got = admitted(m.hits, 1, settled, settled.Add(2*time.Second))
	if n := admitted(m.hits, 1, moved, settled); n == 0 {
		var eu []hit
		for _, h := range m.hits {
			if h.region == 1 && h.sent.Before(settled) {
				eu = append(eu, h)
			}
		}
		t.Errorf("eu admitted nothing while its share grew: its minimum share should absorb the first requests; answers %v", statuses(eu))
	}
	return m
}

// TestTrafficMoves moves a client's traffic from us to eu, at three times
// its limit throughout. The global admitted count must never exceed the
// global allowance, and eu must come to hold most of the share; the test
// reports how long that took and how much of its limit the client got
// after the move.
func TestTrafficMoves(t *testing.T) {
	const rate, burst = 100, 50
	w := newWorld(t, time.Minute, nil, rule{"mover", rate, burst})
	m := moveTraffic(t, w, "mover", rate)
	worst := checkGlobal(t, m.hits, rate, burst, tolerance*rate)
	t.Logf("eu held most of the share %v after the move at the balancer, %v at its gateway (interval %v); "+
		"admitted at most %.1f above burst + rate × elapsed (tolerance %.0f); after the move %d of %d (%.0f%%) of the limit in 2s; answers %v",
		m.balancer.Round(10*time.Millisecond), m.gateway.Round(10*time.Millisecond), interval, worst, tolerance*rate,
		m.got, 2*rate, 100*float64(m.got)/(2*rate), statuses(m.hits))
	if m.got < rate { // the balancer gives eu 90%
		t.Errorf("after the move eu admitted %d in 2s, want most of its 90%% share of %d a second", m.got, rate)
	}
}

// TestSteadySplit sends a client's traffic 60/30/10 across the regions at
// twice its limit: shares must converge to the split, and the client must
// get close to its whole limit.
func TestSteadySplit(t *testing.T) {
	const rate, burst = 100, 20
	w := newWorld(t, time.Minute, nil, rule{"steady", rate, burst})
	tr := newTraffic()
	stop := make(chan struct{})
	for i, part := range []int{60, 30, 10} {
		tr.flow(stop, func() string { return w.gateways[i].URL }, i, "steady", 2*rate*part/100)
	}
	took := w.waitSplit("steady", []float64{0.6, 0.3, 0.1})
	from := time.Now()
	time.Sleep(3 * time.Second)
	close(stop)
	tr.wait()
	hs := tr.of("steady")
	got := admitted(hs, -1, from, from.Add(3*time.Second))
	worst := checkGlobal(t, hs, rate, burst, tolerance*rate)
	for i, r := range regionNames {
		sent := 0
		for _, h := range hs {
			if h.region == i && !h.sent.Before(from) && h.sent.Before(from.Add(3*time.Second)) {
				sent++
			}
		}
		t.Logf("%s: sent %d, admitted %d over 3s", r, sent, admitted(hs, i, from, from.Add(3*time.Second)))
	}
	t.Logf("shares within 0.03 of 60/30/10 after %v, now %v; the client got %d of %d (%.1f%%) over 3s; at most %.1f above the allowance; answers %v",
		took.Round(10*time.Millisecond), w.shares("steady"), got, 3*rate, 100*float64(got)/(3*rate), worst, statuses(hs))
	if got < 3*rate*8/10 {
		t.Errorf("the client got %d of %d over 3s, want at least 80%% of its limit", got, 3*rate)
	}
}

// TestBalancerKilled kills the balancer: the regions keep their shares
// until the stale timeout (2 s here, 5 minutes by default), then every
// key falls back to the fixed even split (a third), or its share in the
// last table where that is smaller.
func TestBalancerKilled(t *testing.T) {
	const rate, burst, stale = 100, 50, 2 * time.Second
	w := newWorld(t, stale, nil, rule{"skewed", rate, burst})
	tr := newTraffic()
	stop := make(chan struct{})
	defer func() { close(stop); tr.wait() }()
	// All of skewed's traffic is in us; another key's in eu and ap
	// makes the regions' whole traffic split about 50/25/25, so us's
	// default share is about a half, not 90%: above the even split, which
	// is what us falls to.
	tr.flow(stop, func() string { return w.gateways[0].URL }, 0, "skewed", 2*rate)
	tr.flow(stop, func() string { return w.gateways[1].URL }, 1, "background", rate)
	tr.flow(stop, func() string { return w.gateways[2].URL }, 2, "background", rate)
	_, v := w.waitShares("skewed", "us to hold 90% of the share", 20*time.Second, func(s []float64) bool { return s[0] >= 0.89 })
	us := w.gateways[0].MetricsURL
	version := float64(v)
	w.waitGateway(0, version)
	w.balancer.Kill()
	killed := time.Now()
	time.Sleep(200 * time.Millisecond)
	kept := admittedOver(tr, "skewed", 0, time.Second)
	if v := metric(t, us, "sluice_region_share_version"); v < version || metric(t, us, "sluice_region_share_stale") != 0 {
		t.Errorf("1.2s after the balancer died: got version %v stale %v, want at least %v and fresh", v, metric(t, us, "sluice_region_share_stale"), version)
	}
	for metric(t, us, "sluice_region_share_stale") != 1 {
		if time.Since(killed) > stale+10*time.Second {
			t.Fatalf("us's shares not stale %v after the balancer died", time.Since(killed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	staleAfter := time.Since(killed)
	def := metric(t, us, "sluice_region_share_default_ratio")
	time.Sleep(200 * time.Millisecond)
	fallback := admittedOver(tr, "skewed", 0, time.Second)
	t.Logf("balancer killed: us admitted %d/s on its kept 90%% share; stale after %v (timeout %v); then %d/s on the even split (its default share %.2f)",
		kept, staleAfter.Round(10*time.Millisecond), stale, fallback, def)
	// The default share follows the regions' whole traffic, about a half
	// here; on a loaded machine us's client may send less and leave it
	// below a third, and then us falls to it rather than to the even split.
	want := min(1.0/3, def) * rate
	if kept < 75 || float64(fallback) > want*1.2+3 || def <= 0 {
		t.Errorf("got %d/s kept and %d/s stale with a default share of %.2f, want about 90 and at most about %.0f (the even split, or the default share where smaller)", kept, fallback, def, want)
	}
	if staleAfter < stale*3/4 { // the last poll answered at most a quarter of the timeout before the kill
		t.Errorf("shares went stale %v after the balancer died, before the %v timeout", staleAfter, stale)
	}
}

// admittedOver waits d and returns how many of key's requests to region i
// sent over it were admitted.
func admittedOver(tr *traffic, key string, i int, d time.Duration) int {
	from := time.Now()
	time.Sleep(d)
	time.Sleep(100 * time.Millisecond) // answers in flight
	return admitted(tr.of(key), i, from, from.Add(d))
}

// TestRegionKilled kills ap, its gateway and its Redis: once ap has missed
// reports for the down-after time (three intervals), its share goes to us
// and eu; when it comes back it gets its share again.
func TestRegionKilled(t *testing.T) {
	const rate, burst = 300, 100
	w := newWorld(t, time.Minute, nil, rule{"spread", rate, burst})
	tr := newTraffic()
	stop, stopAP := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); tr.wait() }()
	for i := range 2 {
		tr.flow(stop, func() string { return w.gateways[i].URL }, i, "spread", rate/3)
	}
	tr.flow(stopAP, func() string { return w.gateways[2].URL }, 2, "spread", rate/3)
	even := func(s []float64) bool { return s[2] > 0.25 && s[0] > 0.25 && s[1] > 0.25 }
	w.waitShares("spread", "an even split", 20*time.Second, even)
	close(stopAP)
	w.gateways[2].Kill()
	redises[2].Kill()
	t.Cleanup(func() {
		if !redises[2].Running() {
			redises[2].Restart()
		}
	})
	gone, _ := w.waitShares("spread", "ap's share to move to us and eu", 20*time.Second, func(s []float64) bool {
		return s[2] == 0 && s[0]+s[1] > 0.99
	})
	if err := redises[2].Restart(); err != nil {
		t.Fatal(err)
	}
	w.startGateway(2)
	stopAP = make(chan struct{})
	defer close(stopAP)
	tr.flow(stopAP, func() string { return w.gateways[2].URL }, 2, "spread", rate/3)
	returned, _ := w.waitShares("spread", "ap's share to come back", 20*time.Second, even)
	t.Logf("ap killed: its share moved to us and eu after %v (down after %v); back %v after its gateway listened again",
		gone.Round(10*time.Millisecond), 3*interval, returned.Round(10*time.Millisecond))
}

// TestSlowBalancer puts a proxy that delays every byte by one second
// between the gateways and the balancer: rebalancing takes longer, but no
// request waits for the balancer. A world without the proxy, in the same
// run, is the baseline.
func TestSlowBalancer(t *testing.T) {
	const rate, burst, delay = 100, 50, time.Second
	fast := moveTraffic(t, newWorld(t, time.Minute, nil, rule{"direct", rate, burst}), "direct", rate)
	slow := moveTraffic(t, newWorld(t, time.Minute, func(url string) string { return delayProxy(t, url, delay) },
		rule{"delayed", rate, burst}), "delayed", rate)
	lat := func(hs []hit) (p50, p99, most time.Duration) {
		var ds []time.Duration
		for _, h := range hs {
			ds = append(ds, h.done.Sub(h.sent))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
	}
	f50, f99, fmax := lat(fast.hits)
	s50, s99, smax := lat(slow.hits)
	t.Logf("rebalance: eu's gateway enforced most of the share %v after the move directly, %v through a %v proxy",
		fast.gateway.Round(10*time.Millisecond), slow.gateway.Round(10*time.Millisecond), delay)
	t.Logf("request latency: p50 %v p99 %v max %v directly; p50 %v p99 %v max %v through the proxy",
		f50, f99, fmax, s50, s99, smax)
	if smax >= delay {
		t.Errorf("a request took %v with the balancer %v away: requests must never wait for it", smax, delay)
	}
	if slow.gateway <= fast.gateway {
		t.Errorf("rebalance took %v through the proxy, %v directly: the delay should show", slow.gateway, fast.gateway)
	}
}

// TestStandbyTakesOver runs a standby balancer beside the primary, and
// gateways that know both. The standby stands by while the primary
// answers; when the primary is killed it takes over (after --down-after,
// then --down-after of reports), and shares follow traffic again, now
// from the standby.
func TestStandbyTakesOver(t *testing.T) {
	const rate, burst = 100, 50
	var standby *proctest.Process
	w := newWorld(t, time.Minute, func(primary string) string {
		standby = startBalancer(t, "--standby-of", primary)
		return primary + "," + standby.URL
	}, rule{"handover", rate, burst})
	tr := newTraffic()
	stopUS, stopEU := make(chan struct{}), make(chan struct{})
	tr.flow(stopUS, func() string { return w.gateways[0].URL }, 0, "handover", 3*rate)
	_, v := w.waitShares("handover", "us to hold most of the share", 20*time.Second, func(s []float64) bool { return s[0] > 0.8 })
	w.waitGateway(0, float64(v))
	if resp, _ := proctest.Do(t, http.MethodGet, standby.URL+"/healthz"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("standby's /healthz while the primary answers: got %d, want 503", resp.StatusCode)
	}
	w.balancer.Kill()
	killed := time.Now()
	// The gateways keep their shares meanwhile; us keeps admitting.
	w.balancer = standby
	close(stopUS)
	tr.flow(stopEU, func() string { return w.gateways[1].URL }, 1, "handover", 3*rate)
	_, v = w.waitShares("handover", "the standby to give eu most of the share", 20*time.Second, func(s []float64) bool { return s[1] > 0.5 })
	handover := time.Since(killed)
	w.waitGateway(1, float64(v))
	close(stopEU)
	tr.wait()
	worst := checkGlobal(t, tr.of("handover"), rate, burst, tolerance*rate)
	t.Logf("primary killed: the standby gave eu most of the share %v later (down-after %v, then %v of reports); at most %.1f above the allowance",
		handover.Round(10*time.Millisecond), 3*interval, 3*interval, worst)
}
