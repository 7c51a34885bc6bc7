package failover

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
)

// The hot key of the pause and outage tests: 300 a second, bursts of 300,
// offered 1,500 a second through three gateways with the default settings.
const hotRate, hotBurst = 300, 300

func hotKey(name string) *limit.Request {
	return &limit.Request{Key: "k:hot-" + name, Limits: []limit.Limit{{Name: "s", Count: hotRate, Period: time.Second, Burst: hotBurst}}}
}

// hotLoad is 500 requests a second for req through each gateway, from
// three clients each, so that a client waiting on Redis does not stop the
// gateway's traffic.
func hotLoad(fleet []*gateway, req *limit.Request) []stream {
	var s []stream
	for _, g := range fleet {
		for range 3 {
			s = append(s, stream{gw: g, reqs: []*limit.Request{req}, every: 6 * time.Millisecond})
		}
	}
	return s
}

// TestPausedRedisKeepsSharedLimits pauses a Redis for 30 ms every second
// (DEBUG SLEEP, as a fork for persistence or a descheduled host does) under
// load on one hot key through three gateways with the default settings. A
// pause is not an outage: every decision stays shared (Redis, a lease or
// the refusal cache, never a local guess), no breaker opens, and the fleet
// admits at most 1% over what the key allows.
//
// The server runs ahead of the other tests sharing the machine, as on a
// machine of its own: descheduled for another 45 ms after a pause, it would
// be silent for the 75 ms that make a node down.
func TestPausedRedisKeepsSharedLimits(t *testing.T) {
	srv := redistest.StandaloneWith(t, "--enable-debug-command", "yes")
	if err := srv.Favour(); err != nil {
		t.Logf("redis-server runs at equal priority: %v", err)
	}
	fleet := pipelineFleet(t, srv, 3)
	req := hotKey("paused")
	begin, _ := serverTime(t, srv)
	stop := make(chan struct{})
	done := make(chan []event)
	go func() { done <- runLoad(hotLoad(fleet, req), stop) }()

	const pauses = 6
	var slept []time.Duration
	for range pauses {
		time.Sleep(time.Second)
		at := time.Now()
		if _, err := srv.Do(t.Context(), "DEBUG", "SLEEP", "0.03"); err != nil {
			close(stop)
			<-done
			t.Fatalf("DEBUG SLEEP: %v", err)
		}
		slept = append(slept, time.Since(at))
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	events := <-done
	end, _ := serverTime(t, srv)

	bySource := map[limit.Source]int{}
	var admitted int
	var waits []time.Duration
	for _, e := range events {
		bySource[e.source]++
		if e.err != nil {
			t.Errorf("request failed: %v", e.err)
			break
		}
		if e.allowed {
			admitted++
		}
		waits = append(waits, e.took)
	}
	elapsed := end.Sub(begin)
	allowance := hotBurst + int(hotRate*elapsed.Seconds())
	t.Logf("%d pauses (DEBUG SLEEP 0.03 answered after %v); %d requests in %v by Redis's clock (%.0f a second): sources %v",
		pauses, slept, len(events), ms(elapsed), float64(len(events))/elapsed.Seconds(), bySource)
	t.Logf("admitted %d of an allowance of %d (burst %d + %d/s × %v): %.2f%%; limiter time per request p50 %v, p99 %v, max %v",
		admitted, allowance, hotBurst, hotRate, ms(elapsed), 100*float64(admitted)/float64(allowance),
		percentile(waits, 50), percentile(waits, 99), percentile(waits, 100))
	for _, d := range slept {
		if d < 30*time.Millisecond {
			t.Fatalf("DEBUG SLEEP 0.03 answered after %v: the server did not pause", d)
		}
	}
	for src, n := range bySource {
		switch src {
		case limit.FromRedis, limit.FromLease, limit.FromRefusalCache:
		default:
			t.Errorf("%d answers from %q, want every one shared (redis, lease or refusal-cache)", n, src)
		}
	}
	if admitted*100 > allowance*101 {
		t.Errorf("admitted %d, want at most 1%% over the allowance of %d", admitted, allowance)
	}
	for _, g := range fleet {
		if st := g.guard.Breaker(srv.Addr()); st != guard.Closed {
			t.Errorf("gateway %d: breaker %v after the pauses, want closed", g.id, st)
		}
	}
}

// TestRedisDownGoesLocal stops a Redis (SIGSTOP: it accepts connections
// and answers nothing, as a hung or cut-off server does) or kills it, under
// load on a hot key and a fail-closed login through three gateways with the
// default settings. Every breaker opens within about 100 ms; the hot key is
// then limited locally at twice its limit across the fleet, counted from
// what Redis last said it had left, not from full local buckets; the login
// is refused and never guessed. The server runs ahead of other tests, as in
// TestPausedRedisKeepsSharedLimits, so that it is healthy until stopped.
func TestRedisDownGoesLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(*redistest.Server) error
	}{
		{"stopped", (*redistest.Server).Stop},
		{"killed", func(s *redistest.Server) error { s.Kill(); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Standalone(t)
			if err := srv.Favour(); err != nil {
				t.Logf("redis-server runs at equal priority: %v", err)
			}
			t.Cleanup(func() { srv.Cont() }) // before the fleet's Close
			fleet := pipelineFleet(t, srv, 3)
			hot := hotKey(tc.name)
			login := &limit.Request{Key: "k:login-" + tc.name, Limits: []limit.Limit{{Name: "login", Count: 100_000, Period: time.Minute, FailClosed: true}}}
			streams := hotLoad(fleet, hot)
			for _, g := range fleet {
				streams = append(streams, stream{gw: g, reqs: []*limit.Request{login}, every: 10 * time.Millisecond})
			}
			stop := make(chan struct{})
			done := make(chan []event)
			go func() { done <- runLoad(streams, stop) }()
			time.Sleep(1500 * time.Millisecond)

			healthy := time.Now() // requests answered before it met a healthy Redis
			if err := tc.down(srv); err != nil {
				close(stop)
				<-done
				t.Fatal(err)
			}
			down := time.Now()
			var firstOpen, allOpen time.Time
			for deadline := down.Add(2 * time.Second); time.Now().Before(deadline) && allOpen.IsZero(); time.Sleep(time.Millisecond) {
				open := 0
				for _, g := range fleet {
					if g.guard.Breaker(srv.Addr()) != guard.Closed {
						open++
					}
				}
				if open > 0 && firstOpen.IsZero() {
					firstOpen = time.Now()
				}
				if open == len(fleet) {
					allOpen = time.Now()
				}
			}
			time.Sleep(3*time.Second - time.Since(down))
			close(stop)
			events := <-done
			ended := time.Now()

			var before, hotAdmitted, hotLocal, loginGuessed, loginLeased, failClosed int
			for _, e := range events {
				if e.at.Add(e.took).Before(healthy) {
					if e.source == limit.FromLocalFallback || e.source == limit.FromFailClosed || e.err != nil {
						before++
					}
					continue
				}
				if e.at.Before(down) {
					continue
				}
				switch {
				case e.key == login.Key && e.allowed && e.source == limit.FromLease:
					// Tokens Redis granted before it went down, spent from
					// memory within the second a lease lasts.
					loginLeased++
				case e.key == login.Key && e.allowed:
					loginGuessed++
				case e.key == login.Key && e.source == limit.FromFailClosed:
					failClosed++
					if !errors.Is(e.err, guard.ErrUnavailable) {
						t.Errorf("fail-closed login: error %v, want one wrapping guard.ErrUnavailable", e.err)
					}
				case e.err != nil:
					t.Errorf("request for %s failed because of the limiter: %v", e.key, e.err)
				case e.key == hot.Key && e.allowed:
					hotAdmitted++
					if e.source == limit.FromLocalFallback {
						hotLocal++
					}
				}
			}
			window := ended.Sub(down)
			// Each gateway holds its part of the key (2/3 of the rate) from
			// what Redis last said was left, which is nothing for a key
			// offered five times its rate; beside that, the tokens it had
			// leased (under 1.5 batches of 300 × 0.1 / 3 = 10) and a
			// rounding token.
			bound := int(2*hotRate*window.Seconds()) + len(fleet)*(15+1)
			t.Logf("Redis %s: first breaker open +%v, all three +%v; hot key admitted %d in the %v after (%d locally; %.2fx its limit over that time; bound %d, where full local buckets would add %d); login: %d fail-closed, %d allowed from leases, %d otherwise",
				tc.name, ms(firstOpen.Sub(down)), ms(allOpen.Sub(down)), hotAdmitted, ms(window), hotLocal,
				float64(hotAdmitted)/(hotRate*window.Seconds()), bound, 2*hotBurst, failClosed, loginLeased, loginGuessed)
			if before > 0 {
				t.Errorf("before Redis went down: %d answers local, fail-closed or failed, want none", before)
			}
			if allOpen.IsZero() || allOpen.Sub(down) > time.Second {
				t.Fatalf("breakers not all open within 1 s of Redis going down (first open %v after)", firstOpen.Sub(down))
			}
			if hotAdmitted > bound {
				t.Errorf("hot key: %d admitted in the %v after Redis went down, want at most %d (twice its rate)", hotAdmitted, ms(window), bound)
			}
			if hotLocal == 0 {
				t.Errorf("hot key: no local answer admitted while Redis was down, want its local share")
			}
			if failClosed == 0 || loginGuessed > 0 {
				t.Errorf("login while Redis was down: %d fail-closed refusals, %d allowed without a lease; want refusals, and never a local guess", failClosed, loginGuessed)
			}
		})
	}
}
