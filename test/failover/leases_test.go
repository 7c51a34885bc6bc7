package failover

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// TestLeasesNeverOver sends traffic far above a busy key's limit through
// several gateways, each with its own Redis connections and leases, and
// checks the fleet never admitted more than the bucket allows: burst + rate
// × elapsed, elapsed by Redis's clock. In the second case one gateway is
// dropped halfway, holding leased tokens: they are lost, nothing more.
func TestLeasesNeverOver(t *testing.T) {
	const rate, burst = 2000, 200 // batch per gateway: 2000 × 0.1 / 4 = 50
	for _, tc := range []struct {
		name string
		drop bool
	}{
		{"four gateways", false},
		{"one gateway dropped holding leases", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet := newFleet(t, fleetConfig{gateways: 4, guard: calmGuard})
			req := limit.Request{Key: "busy-" + t.Name(), Limits: []limit.Limit{{Name: "s", Count: rate, Period: time.Second, Burst: burst}}}
			var (
				admitted, sent atomic.Int64
				dropped        atomic.Bool
				wg             sync.WaitGroup
			)
			begin := redisTime(t)
			deadline := time.Now().Add(1500 * time.Millisecond)
			for w := range 4 {
				wg.Go(func() {
					r := req
					for i := w; time.Now().Before(deadline); i++ {
						g := fleet[i%len(fleet)]
						if g.id == 0 && dropped.Load() {
							continue // the dropped gateway gets no more traffic
						}
						a, err := g.decide(context.Background(), &r)
						if err != nil {
							t.Error(err)
							return
						}
						if a.Source == limit.FromLocalFallback {
							t.Errorf("answer from %s: the guard fell back with nothing broken", a.Source)
							return
						}
						sent.Add(1)
						if a.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			if tc.drop {
				time.Sleep(750 * time.Millisecond)
				dropped.Store(true)
				fleet[0].lease.Close() // as a crash would: its leased tokens are never spent
			}
			wg.Wait()
			end := redisTime(t)
			elapsed := end.Sub(begin)
			bound := burst + int64(rate*elapsed.Seconds())
			got := admitted.Load()
			t.Logf("%d requests (%.0f a second, %.0fx the limit) in %v by Redis's clock: %d admitted of a possible %d (%.1f%%)",
				sent.Load(), float64(sent.Load())/elapsed.Seconds(), float64(sent.Load())/elapsed.Seconds()/rate,
				elapsed.Round(time.Millisecond), got, bound, 100*float64(got)/float64(bound))
			if got > bound {
				t.Errorf("got %d admitted, want at most %d (burst %d + %d/s × %v)", got, bound, burst, rate, elapsed)
			}
		})
	}
}

// TestCallsPerRequest measures the Redis calls a busy key within its limit
// costs, through three gateways, with leases and with the per-request check.
func TestCallsPerRequest(t *testing.T) {
	const rate = 4000 // traffic: 3 gateways × about 1,000 a second
	ratios := map[bool]float64{}
	for _, noLeases := range []bool{true, false} {
		fleet := newFleet(t, fleetConfig{gateways: 3, noLeases: noLeases, guard: calmGuard})
		req := &limit.Request{Key: "steady-" + t.Name(), Limits: []limit.Limit{{Name: "s", Count: rate, Period: time.Second}}}
		var streams []stream
		for _, g := range fleet {
			streams = append(streams, stream{gw: g, reqs: []*limit.Request{req}, every: time.Millisecond})
		}
		stop := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(stop) })
		events := runLoad(streams, stop)
		calls, refused := int64(0), 0
		for _, g := range fleet {
			calls += g.redis.calls.Load()
		}
		for _, e := range events {
			if e.err != nil || e.source == limit.FromLocalFallback {
				t.Fatalf("request failed or fell back with nothing broken: %v %s", e.err, e.source)
			}
			if !e.allowed {
				refused++
			}
		}
		ratios[noLeases] = float64(calls) / float64(len(events))
		t.Logf("leases %v: %d requests, %d refused, %d Redis calls: %.3f calls per request", !noLeases, len(events), refused, calls, ratios[noLeases])
		if refused > 0 {
			t.Errorf("leases %v: %d of %d requests refused, want none: traffic is within the limit", !noLeases, refused, len(events))
		}
	}
	t.Logf("leases cut Redis calls per request %.0fx", ratios[true]/ratios[false])
	if ratios[false] > ratios[true]/5 {
		t.Errorf("got %.3f calls per request with leases and %.3f without, want at least 5x fewer with them", ratios[false], ratios[true])
	}
}

// TestRefusalCache sends a client hundreds of times over its limit through
// three gateways and counts what it costs its shard: about one call per
// gateway per retry interval, not one per request.
func TestRefusalCache(t *testing.T) {
	const rate = 10 // a token every 100 ms: the retry interval
	fleet := newFleet(t, fleetConfig{gateways: 3, guard: calmGuard})
	req := &limit.Request{Key: "runaway-" + t.Name(), Limits: []limit.Limit{{Name: "s", Count: rate, Period: time.Second}}}
	var streams []stream
	for _, g := range fleet {
		for range 2 {
			streams = append(streams, stream{gw: g, reqs: []*limit.Request{req}, every: 500 * time.Microsecond})
		}
	}
	begin := time.Now()
	stop := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop) })
	events := runLoad(streams, stop)
	elapsed := time.Since(begin)
	admitted := 0
	for _, e := range events {
		if e.err != nil || e.source == limit.FromLocalFallback {
			t.Fatalf("request failed or fell back with nothing broken: %v %s", e.err, e.source)
		}
		if e.allowed {
			admitted++
		}
	}
	intervals := elapsed.Seconds() * rate
	t.Logf("%d requests in %v: %.0fx the limit of %d/s; %d admitted", len(events), elapsed.Round(time.Millisecond),
		float64(len(events))/elapsed.Seconds()/rate, rate, admitted)
	for _, g := range fleet {
		calls := g.redis.calls.Load()
		per := float64(calls) / intervals
		t.Logf("gateway %d: %d Redis calls, %.2f per retry interval (100 ms)", g.id, calls, per)
		if per > 3 {
			t.Errorf("gateway %d: got %.2f Redis calls per retry interval, want at most 3", g.id, per)
		}
	}
	if bound := int(rate*elapsed.Seconds()) + rate; admitted > bound {
		t.Errorf("got %d admitted, want at most %d (burst + rate × elapsed)", admitted, bound)
	}
}

// TestHotRefusedKey: clients retrying as fast as they can, far over one
// key's limit, through three gateways. Each gateway keeps one call in
// flight for the refused key and remembers a refusal until a batch is due,
// so its Redis calls stay bounded per second however hard clients retry,
// and the fleet never admits more than the bucket allows.
func TestHotRefusedKey(t *testing.T) {
	const rate, burst = 100, 100
	fleet := newFleet(t, fleetConfig{gateways: 3, guard: calmGuard})
	req := &limit.Request{Key: "hot-" + t.Name(), Limits: []limit.Limit{{Name: "s", Count: rate, Period: time.Second, Burst: burst}}}
	var requests, admitted atomic.Int64
	start := redisTime(t)
	began := time.Now()
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, g := range fleet {
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					r := *req
					d, err := g.decide(t.Context(), &r)
					if err != nil || d.Source == limit.FromLocalFallback {
						t.Errorf("request failed or fell back with nothing broken: %v %s", err, d.Source)
						return
					}
					requests.Add(1)
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(began)
	end := redisTime(t)
	bound := burst + int64(float64(rate)*end.Sub(start).Seconds())
	var calls int64
	for _, g := range fleet {
		c := g.redis.calls.Load()
		calls += c
		perSecond := float64(c) / elapsed.Seconds()
		t.Logf("gateway %d: %d Redis calls, %.0f a second", g.id, c, perSecond)
		// A refused key: one call in flight, then one per refusal hold
		// (20 to 30 ms here); after each grant, the waiting requests race
		// for the batch, and those that find it spent ask once each. Twice
		// the rate is far above that and far below the clients' retries.
		if perSecond > 2*rate {
			t.Errorf("gateway %d: %.0f Redis calls a second for one refused key, want at most %d", g.id, perSecond, 2*rate)
		}
	}
	n := requests.Load()
	t.Logf("%d requests in %v (%.0fx the limit): %d admitted of %d allowed (burst + rate × elapsed by Redis's clock); %.4f Redis calls per request",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds()/rate, admitted.Load(), bound, float64(calls)/float64(n))
	if admitted.Load() > bound {
		t.Errorf("admitted %d, more than the %d the bucket allows", admitted.Load(), bound)
	}
}
