package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// outageKeys are the clients of the outage tests: four on the broken
// primary, one elsewhere.
type outageKeys struct {
	steady, runaway, login, other *limit.Request
}

const (
	runawayRate, runawayBurst = 100, 100
)

func newOutageKeys(t *testing.T, victim string) outageKeys {
	return outageKeys{
		// A client well within its limit: it should never notice.
		steady: &limit.Request{Key: keyOn(t, "steady", victim, true), Limits: []limit.Limit{{Name: "s", Count: 1000, Period: time.Second}}},
		// A client far over its limit: during the outage it must stay
		// within about twice its limit.
		runaway: &limit.Request{Key: keyOn(t, "runaway", victim, true), Limits: []limit.Limit{{Name: "s", Count: runawayRate, Period: time.Second, Burst: runawayBurst}}},
		// A security limit: it refuses rather than guess.
		login: &limit.Request{Key: keyOn(t, "login", victim, true), Limits: []limit.Limit{{Name: "login", Count: 100_000, Period: time.Minute, FailClosed: true}}},
		// A client on another shard: it should never notice either.
		other: &limit.Request{Key: keyOn(t, "other", victim, false), Limits: []limit.Limit{{Name: "s", Count: 1000, Period: time.Second}}},
	}
}

// outageLoad is each gateway's traffic: the runaway client at 2,000 a
// second per gateway (60 times its limit across three), the others at 100
// a second each.
func outageLoad(fleet []*gateway, k outageKeys) []stream {
	var s []stream
	for _, g := range fleet {
		s = append(s,
			stream{gw: g, reqs: []*limit.Request{k.runaway}, every: 500 * time.Microsecond},
			stream{gw: g, reqs: []*limit.Request{k.steady, k.login, k.other}, every: 3300 * time.Microsecond},
		)
	}
	return s
}

// TestKillPrimary kills the primary serving four clients' keys under steady
// load through three gateways and follows them until its replica has taken
// over and every gateway counts in Redis again. It checks each promise of
// an outage: no request fails because of the limiter (fail-closed limits
// refuse), no request waits on the dead node once its breaker is open, the
// runaway client stays within about twice its limit, other shards are
// untouched, and shared counting resumes after the promotion.
func TestKillPrimary(t *testing.T) {
	ctx := t.Context()
	fleet := newFleet(t, fleetConfig{gateways: 3, guard: outageGuard})
	victim, err := cluster.NodeForSlot(ctx, int(redisstore.Slot("steady-0")))
	if err != nil {
		t.Fatal(err)
	}
	keys := newOutageKeys(t, victim.Addr())
	stop := make(chan struct{})
	done := make(chan []event)
	go func() { done <- runLoad(outageLoad(fleet, keys), stop) }()
	defer restore(t, victim)

	// Steady state first: every gateway counting in Redis for a second.
	time.Sleep(time.Second)
	if waitFor(func() bool { return allState(fleet, victim.Addr(), guard.Closed) }, 10*time.Second).IsZero() {
		close(stop)
		<-done
		t.Fatalf("before the kill: breakers for %s not all closed", victim.Addr())
	}
	killed := time.Now()
	if err := cluster.Kill(ctx, victim); err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	heir, err := cluster.WaitFailover(ctx, victim)
	promoted := time.Now()
	if err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	// Run until every gateway has answered the victim's keys from Redis
	// for a while, then a little longer.
	var recovered time.Time
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if allMoved(fleet, redisstore.Slot(keys.steady.Key), heir.Addr()) {
			recovered = time.Now()
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(time.Second)
	close(stop)
	events := <-done
	if recovered.IsZero() {
		t.Fatalf("20 s after the promotion, some gateway still has no closed breaker for %s", heir.Addr())
	}

	// The timeline.
	var firstOpen, lastLocal time.Time
	for _, g := range fleet {
		for _, tr := range g.history() {
			if tr.shard == victim.Addr() && tr.to == guard.Open && !tr.at.Before(killed) && (firstOpen.IsZero() || tr.at.Before(firstOpen)) {
				firstOpen = tr.at
			}
		}
	}
	victimKeys := map[string]bool{keys.steady.Key: true, keys.runaway.Key: true, keys.login.Key: true}
	for _, e := range events {
		if victimKeys[e.key] && (e.source == limit.FromLocalFallback || e.source == limit.FromFailClosed) && e.at.After(lastLocal) {
			lastLocal = e.at
		}
	}
	t.Logf("timeline: primary %s killed at 0; first breaker open +%v; replica %s promoted (all nodes agree) +%v; every gateway counting on it +%v; last local answer +%v",
		victim.Addr(), ms(firstOpen.Sub(killed)), heir.Addr(), ms(promoted.Sub(killed)), ms(recovered.Sub(killed)), ms(lastLocal.Sub(killed)))
	if firstOpen.IsZero() {
		t.Fatalf("no gateway opened its breaker for %s", victim.Addr())
	}

	// Answers by key and phase: before the kill; down, until the replica
	// is promoted; healing, until every gateway counts on it; after.
	type tally struct{ total, local, allowedLocal, failClosed, refused int }
	phaseNames := []string{"before", "down", "healing", "after"}
	phases := make([]map[string]*tally, len(phaseNames))
	for i := range phases {
		phases[i] = map[string]*tally{}
	}
	var outageTook []time.Duration
	for _, e := range events {
		ph := 0
		switch {
		case e.at.After(recovered):
			ph = 3
		case !e.at.Before(promoted):
			ph = 2
		case !e.at.Before(killed):
			ph = 1
		}
		tl := phases[ph][e.key]
		if tl == nil {
			tl = &tally{}
			phases[ph][e.key] = tl
		}
		tl.total++
		switch {
		case e.source == limit.FromFailClosed:
			tl.failClosed++
			if !errors.Is(e.err, guard.ErrUnavailable) {
				t.Errorf("fail-closed answer for %s: got error %v, want one wrapping guard.ErrUnavailable", e.key, e.err)
			}
		case e.err != nil:
			t.Errorf("request for %s failed because of the limiter: %v", e.key, e.err)
		case !e.allowed:
			tl.refused++
		}
		if e.source == limit.FromLocalFallback {
			tl.local++
			if e.allowed {
				tl.allowedLocal++
			}
		}
		if (ph == 1 || ph == 2) && victimKeys[e.key] {
			outageTook = append(outageTook, e.took)
		}
	}
	get := func(ph int, k *limit.Request) tally {
		if tl := phases[ph][k.Key]; tl != nil {
			return *tl
		}
		return tally{}
	}
	all := []*limit.Request{keys.steady, keys.runaway, keys.login, keys.other}
	for i, name := range phaseNames {
		for _, k := range all {
			tl := get(i, k)
			t.Logf("%-7s %-10s %5d requests: %5d local (%d allowed), %4d fail-closed, %5d refused", name, k.Key, tl.total, tl.local, tl.allowedLocal, tl.failClosed, tl.refused)
		}
	}
	t.Logf("limiter time per request on the victim's keys from the kill to recovery (%d requests): p50 %v, p99 %v, max %v",
		len(outageTook), percentile(outageTook, 50), percentile(outageTook, 99), percentile(outageTook, 100))

	// Login refuses while its shard is down, and never from a local guess.
	if tl := get(1, keys.login); tl.failClosed == 0 {
		t.Errorf("login while its shard is down: no fail-closed refusal in %d requests, want some", tl.total)
	}
	for i := range phases {
		if tl := get(i, keys.login); tl.local > 0 {
			t.Errorf("login, %s: %d answers from the local fallback, want none: it fails closed", phaseNames[i], tl.local)
		}
	}
	// Clients within their limits are never refused, on any shard.
	for _, k := range []*limit.Request{keys.steady, keys.other} {
		for i := range phases {
			if tl := get(i, k); tl.refused > 0 {
				t.Errorf("%s, well within its limit, %s: %d of %d requests refused", k.Key, phaseNames[i], tl.refused, tl.total)
			}
		}
	}
	// While the shard is down its keys go local (after the leased tokens
	// of the last second); another shard's do not. A request elsewhere may
	// still fall back alone when a call runs into its deadline on a loaded
	// machine, so the test compares shares.
	steady := get(1, keys.steady)
	other := get(1, keys.other)
	other2 := get(2, keys.other)
	other.total, other.local = other.total+other2.total, other.local+other2.local
	t.Logf("shard down: %.0f%% of %s's answers local; kill to recovery: %.1f%% of %s's (another shard)",
		100*float64(steady.local)/float64(max(steady.total, 1)), keys.steady.Key, 100*float64(other.local)/float64(max(other.total, 1)), keys.other.Key)
	if steady.local*2 < steady.total {
		t.Errorf("shard down: %d of %d answers for %s local, want most", steady.local, steady.total, keys.steady.Key)
	}
	if other.local*10 > other.total {
		t.Errorf("another shard, kill to recovery: %d of %d answers local, want under 10%%", other.local, other.total)
	}

	// The runaway client, locally: each gateway's bucket refills at 2/3 of
	// the rate, so the fleet admits at most twice the limit over the time
	// it ran locally, starting from what Redis last said was left (2/3 of
	// it each), which for a client this far over its limit is nothing.
	localAdmitted := 0
	for i := range phases {
		localAdmitted += get(i, keys.runaway).allowedLocal
	}
	// Each gateway's local bucket counts from Redis's last word, said
	// before the first local answer, so the span counts from the first,
	// plus 100 ms of refill before it.
	var firstLocal, lastRunaway time.Time
	for _, e := range events {
		if e.key == keys.runaway.Key && e.source == limit.FromLocalFallback {
			if firstLocal.IsZero() || e.at.Before(firstLocal) {
				firstLocal = e.at
			}
			if e.at.After(lastRunaway) {
				lastRunaway = e.at.Add(e.took)
			}
		}
	}
	window := lastRunaway.Sub(firstLocal)
	bound := int(2*runawayRate*(window+100*time.Millisecond).Seconds()) + len(fleet)
	t.Logf("runaway client: %d admitted by the local fallback in %v; at most %d at twice its limit (%d/s), where full local buckets would add %d",
		localAdmitted, ms(window), bound, runawayRate, 2*runawayBurst)
	if localAdmitted > bound {
		t.Errorf("runaway client: got %d admitted locally in %v, want at most %d (2 × rate × (time + 100 ms))", localAdmitted, ms(window), bound)
	}

	// No request waited on the dead node once its breaker was open: a
	// gateway's failed calls to it are at most the trip count plus the
	// calls already in flight when it opened (its 2 streams and 3 keys'
	// refills), plus one probe per reopening. Failures elsewhere are
	// reported: right after the promotion the client may still route to
	// the dead node for a moment, and a loaded machine may time out.
	for _, g := range fleet {
		for shard, fails := range g.redis.shardFailures() {
			opens := g.opens(shard)
			t.Logf("gateway %d: node %s: breaker opened %d times; %d failed Redis calls, the last: %v", g.id, shard, opens, fails, g.redis.lastFailure(shard))
			if limit := 5 + 5 + opens; shard == victim.Addr() && fails > limit {
				t.Errorf("gateway %d: dead node %s: %d failed calls over %d breaker cycles, want at most %d", g.id, shard, fails, opens, limit)
			}
		}
	}

	// Shared counting resumed: after recovery the victim's keys are
	// answered by Redis (or leases and refusals it gave), not locally.
	for _, k := range []*limit.Request{keys.steady, keys.runaway, keys.login} {
		if tl := get(3, k); tl.total == 0 || (tl.local+tl.failClosed)*10 > tl.total {
			t.Errorf("%s after recovery: %d of %d answers local or fail-closed, want under 10%%", k.Key, tl.local+tl.failClosed, tl.total)
		}
	}
}

// TestFreezePrimary freezes a primary (SIGSTOP) a few times, for less than
// the cluster's node timeout so that it is not failed over: calls run into
// their deadline, the breakers open and the keys are limited locally; after
// SIGCONT the breakers' probes find it answering and close. Goroutines and
// the node's client connections are the same after the cycles as before.
func TestFreezePrimary(t *testing.T) {
	ctx := t.Context()
	fleet := newFleet(t, fleetConfig{gateways: 2, guard: outageGuard})
	victim, err := cluster.NodeForSlot(ctx, int(redisstore.Slot("steady-0")))
	if err != nil {
		t.Fatal(err)
	}
	defer restore(t, victim)
	keys := newOutageKeys(t, victim.Addr())
	var streams []stream
	for _, g := range fleet {
		streams = append(streams, stream{gw: g, reqs: []*limit.Request{keys.steady, keys.runaway}, every: 2 * time.Millisecond})
	}
	stop := make(chan struct{})
	done := make(chan []event)
	go func() { done <- runLoad(streams, stop) }()
	time.Sleep(500 * time.Millisecond)

	// The first cycle warms up whatever the client makes lazily; the
	// counts are compared between the end of the first and of the last.
	others, clients := 0, 0
	const cycles = 4
	for c := range cycles + 1 {
		switch c {
		case 1:
			_, others = goroutines()
			clients = connectedClients(t, victim)
		case cycles:
			conn, n := settledGoroutines(others)
			cl := connectedClients(t, victim)
			t.Logf("%d freeze cycles after the first: %d goroutines besides the Redis client's %d connection goroutines (before: %d); %d clients on the node (before: %d)",
				cycles-1, n, conn, others, cl, clients)
			if n > others {
				t.Errorf("goroutines: %d before %d breaker cycles, %d after", others, cycles-1, n)
			}
			// Each of the 2 gateways has a connection to each of the 6
			// nodes (the store loads its scripts on replicas too, so that a
			// promoted one has them), and rueidis runs a reader and a writer
			// for each.
			if conn > 2*6*2 {
				t.Errorf("Redis client connection goroutines: got %d, want at most 24 (2 per connection)", conn)
			}
			if cl > clients {
				t.Errorf("client connections on %s: %d before %d breaker cycles, %d after", victim.Addr(), clients, cycles-1, cl)
			}
		}
		if c == cycles {
			break
		}
		timeouts := fleet[0].redis.timeouts.Load() + fleet[1].redis.timeouts.Load()
		var perGateway [2]struct {
			timeouts int64
			opens    int
		}
		for i, g := range fleet {
			perGateway[i].timeouts, perGateway[i].opens = g.redis.timeouts.Load(), g.opens(victim.Addr())
		}
		frozen := time.Now()
		if err := cluster.Stop(ctx, victim); err != nil {
			t.Fatal(err)
		}
		opened := waitFor(func() bool { return allState(fleet, victim.Addr(), guard.Open, guard.HalfOpen) }, 5*time.Second)
		// Stay frozen for 600 ms in all: less than the 1 s node timeout.
		time.Sleep(600*time.Millisecond - time.Since(frozen))
		if err := cluster.Cont(victim); err != nil {
			t.Fatal(err)
		}
		thawed := time.Now()
		closed := waitFor(func() bool { return allState(fleet, victim.Addr(), guard.Closed) }, 10*time.Second)
		t.Logf("cycle %d: every breaker open +%v after SIGSTOP; SIGCONT at +%v; every breaker closed +%v after SIGCONT; %d timeouts",
			c+1, ms(opened.Sub(frozen)), ms(thawed.Sub(frozen)), ms(closed.Sub(thawed)),
			fleet[0].redis.timeouts.Load()+fleet[1].redis.timeouts.Load()-timeouts)
		switch {
		case opened.IsZero():
			t.Fatalf("cycle %d: breakers not all open 5 s after SIGSTOP", c+1)
		case closed.IsZero():
			t.Fatalf("cycle %d: breakers not all closed 10 s after SIGCONT", c+1)
		case fleet[0].redis.timeouts.Load()+fleet[1].redis.timeouts.Load() == timeouts:
			t.Errorf("cycle %d: no call ran into its deadline while the node was frozen", c+1)
		}
		// No request waited out a deadline once the breaker was open: per
		// gateway, the timed-out calls of a cycle are the trip count plus
		// the calls in flight when it opened (2 streams, 2 keys' refills)
		// plus one probe per reopening.
		for i, g := range fleet {
			n := g.redis.timeouts.Load() - perGateway[i].timeouts
			opens := g.opens(victim.Addr()) - perGateway[i].opens
			if limit := int64(5 + 4 + opens); n > limit {
				t.Errorf("cycle %d, gateway %d: %d calls timed out over %d openings, want at most %d", c+1, i, n, opens, limit)
			}
		}
	}
	close(stop)
	events := <-done
	for _, e := range events {
		if e.err != nil {
			t.Errorf("request for %s failed: %v", e.key, e.err)
			break
		}
	}
	if n, err := cluster.NodeForSlot(ctx, int(redisstore.Slot(keys.steady.Key))); err == nil && n != victim {
		t.Logf("note: the frozen node was failed over to %s after all", n.Addr())
	}
}

// restore brings a killed or frozen node back and waits for the cluster to
// be whole, for the tests that follow.
func restore(t *testing.T, n *redistest.Server) {
	t.Helper()
	n.Cont() // a running or killed node refuses; that is fine
	if !n.Running() {
		if err := n.Restart(); err != nil {
			t.Errorf("restart %s: %v", n.Addr(), err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cluster.WaitHealthy(ctx); err != nil {
		t.Errorf("cluster after restoring %s: %v", n.Addr(), err)
	}
}

// allMoved reports whether every gateway names heir as the node of slot and
// has its breaker for heir closed: shared counting goes on there.
func allMoved(fleet []*gateway, slot uint16, heir string) bool {
	for _, g := range fleet {
		if g.redis.NodeAddr(slot) != heir || g.guard.Breaker(heir) != guard.Closed {
			return false
		}
	}
	return true
}

// allState reports whether every gateway's breaker for shard is in one of
// states.
func allState(fleet []*gateway, shard string, states ...guard.State) bool {
	for _, g := range fleet {
		s := g.guard.Breaker(shard)
		ok := false
		for _, want := range states {
			ok = ok || s == want
		}
		if !ok {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds, returning when, or the zero time after
// timeout.
func waitFor(cond func() bool, timeout time.Duration) time.Time {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return time.Now()
		}
	}
	return time.Time{}
}

// connectedClients reads INFO clients' connected_clients from n.
func connectedClients(t *testing.T, n *redistest.Server) int {
	t.Helper()
	v, err := n.Do(t.Context(), "INFO", "clients")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(fmt.Sprint(v)) {
		var c int
		if _, err := fmt.Sscanf(line, "connected_clients:%d", &c); err == nil {
			return c
		}
	}
	t.Fatalf("INFO clients has no connected_clients: %v", v)
	return 0
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
