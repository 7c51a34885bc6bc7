package failover

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// counting is a gateway's Redis store with its calls counted: what the
// shard pays for the gateway's traffic.
type counting struct {
	*redisstore.Store
	calls, failures, timeouts atomic.Int64

	mu      sync.Mutex
	byShard map[string]int   // guarded by mu; failed calls by the node the key was on
	lastErr map[string]error // guarded by mu; the last failure by node
}

func (c *counting) count(ctx context.Context, node string, err error) {
	c.calls.Add(1)
	if err == nil {
		return
	}
	c.failures.Add(1)
	// The guard ends a call to a stalled node by cancelling it with a
	// deadline as the cause.
	if errors.Is(err, redisstore.ErrTimeout) || errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		c.timeouts.Add(1)
	}
	c.mu.Lock()
	if c.byShard == nil {
		c.byShard, c.lastErr = map[string]int{}, map[string]error{}
	}
	c.byShard[node]++
	c.lastErr[node] = err
	c.mu.Unlock()
}

// lastFailure returns the last failed call's error on node.
func (c *counting) lastFailure(node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr[node]
}

// shardFailures returns the failed calls by node.
func (c *counting) shardFailures() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byShard)
}

func (c *counting) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	node := c.NodeAddr(redisstore.Slot(req.Key))
	d, err := c.Store.Take(ctx, req)
	c.count(ctx, node, err)
	return d, err
}

func (c *counting) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	node := c.NodeAddr(redisstore.Slot(req.Key))
	g, d, err := c.Store.TakeUpTo(ctx, req, want)
	c.count(ctx, node, err)
	return g, d, err
}

// transition is one breaker change a gateway saw.
type transition struct {
	at       time.Time
	shard    string
	from, to guard.State
}

// gateway is one gateway's limiter, wired as cmd/sluice wires it: its own
// Redis connections, a guard, and (unless disabled) a lease store on top.
type gateway struct {
	id    int
	redis *counting
	guard *guard.Store
	lease *lease.Store // nil: every request goes to the guard
	// pipe, if set, is a whole pipeline.Pipeline with the production
	// defaults, which answers instead of the layers above.
	pipe *pipeline.Pipeline

	mu          sync.Mutex
	transitions []transition // guarded by mu
	refreshes   []refresh    // guarded by mu
}

// refresh is one read of the slot map the guard asked for.
type refresh struct {
	at   time.Time
	took time.Duration
	err  error
}

func (g *gateway) decide(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	if g.pipe != nil {
		return g.pipe.Take(ctx, req)
	}
	if g.lease != nil {
		return g.lease.Take(ctx, req)
	}
	return g.guard.Take(ctx, req)
}

// history returns the breaker transitions the gateway saw so far.
func (g *gateway) history() []transition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.transitions)
}

func (g *gateway) opens(shard string) int {
	n := 0
	for _, tr := range g.history() {
		if tr.shard == shard && tr.to == guard.Open {
			n++
		}
	}
	return n
}

// fleetConfig describes a fleet of in-process gateways.
type fleetConfig struct {
	gateways int
	noLeases bool
	guard    guard.Config // Timeout, TripAfter, Pause; the rest is wiring
}

// outageGuard is the guard configuration of the outage tests: the default
// trip count, a 1 s pause instead of 2 s to keep the tests short, and a
// deadline of 100 ms instead of production's 5 ms, because on a two-core
// test machine under the race detector a healthy call's p99 is about 30 ms,
// and a shorter deadline would trip breakers on healthy shards.
var outageGuard = guard.Config{Timeout: 100 * time.Millisecond, Pause: time.Second, RefreshEvery: 100 * time.Millisecond}

// calmGuard is the guard configuration of the tests that break nothing: a
// deadline no healthy call reaches, so that every answer is Redis's or a
// lease's and the tests measure leases, not the fallback.
var calmGuard = guard.Config{Timeout: 2 * time.Second}

// newFleet starts cfg.gateways gateways on the package's cluster, each with
// its own connections, and closes them when the test ends.
func newFleet(t *testing.T, cfg fleetConfig) []*gateway {
	t.Helper()
	var fleet []*gateway
	for i := range cfg.gateways {
		rs, err := redisstore.New(t.Context(), redisstore.Config{Addrs: cluster.Addrs()})
		if err != nil {
			t.Fatal(err)
		}
		g := &gateway{id: i, redis: &counting{Store: rs}}
		gc := cfg.guard
		gc.Fleet.Gateways = cfg.gateways
		gc.Shard = func(key string) string { return rs.NodeAddr(redisstore.Slot(key)) }
		gc.Refresh = func(ctx context.Context) error {
			began := time.Now()
			err := rs.RefreshNodes(ctx)
			g.mu.Lock()
			g.refreshes = append(g.refreshes, refresh{began, time.Since(began), err})
			g.mu.Unlock()
			return err
		}
		gc.OnTransition = func(shard string, from, to guard.State, _ error) {
			g.mu.Lock()
			g.transitions = append(g.transitions, transition{time.Now(), shard, from, to})
			g.mu.Unlock()
		}
		if g.guard, err = guard.New(g.redis, gc); err != nil {
			t.Fatal(err)
		}
		if !cfg.noLeases {
			if g.lease, err = lease.New(g.guard, lease.Config{Fleet: limit.Fleet{Gateways: cfg.gateways}}); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			if g.lease != nil {
				g.lease.Close()
			}
			g.guard.Close()
			rs.Close()
		})
		fleet = append(fleet, g)
	}
	return fleet
}

// event is one request's outcome.
type event struct {
	at      time.Time
	took    time.Duration
	gateway int
	key     string
	source  limit.Source
	allowed bool
	err     error
}

// stream is paced traffic from one client through one gateway: a request
// every interval, cycling through reqs.
type stream struct {
	gw    *gateway
	reqs  []*limit.Request
	every time.Duration
}

// runLoad sends every stream's traffic until stop is closed and returns
// every request's outcome, in no particular order.
func runLoad(streams []stream, stop <-chan struct{}) []event {
	var (
		mu  sync.Mutex
		all []event
		wg  sync.WaitGroup
	)
	for _, s := range streams {
		wg.Go(func() {
			var evs []event
			tick := time.NewTicker(s.every)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, evs...)
					mu.Unlock()
					return
				case <-tick.C:
				}
				req := s.reqs[i%len(s.reqs)]
				began := time.Now()
				a, err := s.gw.decide(context.Background(), req)
				evs = append(evs, event{at: began, took: time.Since(began), gateway: s.gw.id, key: req.Key,
					source: a.Source, allowed: err == nil && a.Allowed, err: err})
			}
		})
	}
	wg.Wait()
	return all
}

// redisTime reads the cluster's clock (TIME) from a running node: the
// clock the scripts refill buckets by.
func redisTime(t *testing.T) time.Time {
	t.Helper()
	for _, n := range cluster.Nodes() {
		if !n.Running() {
			continue
		}
		if at, ok := serverTime(t, n); ok {
			return at
		}
	}
	t.Fatal("TIME: no node is running")
	return time.Time{}
}

// serverTime reads n's clock (TIME), and false if n does not answer.
func serverTime(t *testing.T, n *redistest.Server) (time.Time, bool) {
	t.Helper()
	v, err := n.Do(t.Context(), "TIME")
	if err != nil {
		return time.Time{}, false
	}
	parts, ok := v.([]any)
	if !ok || len(parts) != 2 {
		t.Fatalf("TIME replied %v, want [seconds microseconds]", v)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(parts[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(parts[1]), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME replied %v, want two integers", v)
	}
	return time.Unix(sec, usec*1000), true
}

// pipelineFleet starts n gateways' decision stacks over the standalone
// server srv, as cmd/sluice builds them with default flags and --gateways
// n, and closes them when the test ends.
func pipelineFleet(t *testing.T, srv *redistest.Server, n int) []*gateway {
	t.Helper()
	var fleet []*gateway
	for i := range n {
		p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: n}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		fleet = append(fleet, &gateway{id: i, pipe: p, guard: p.Guard()})
	}
	return fleet
}

// keyOn returns a request key starting with prefix whose slot the primary
// at addr serves (on == true) or does not serve (on == false).
func keyOn(t *testing.T, prefix, addr string, on bool) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprintf("%s-%d", prefix, i)
		n, err := cluster.NodeForSlot(t.Context(), int(redisstore.Slot(k)))
		if err != nil {
			t.Fatal(err)
		}
		if (n.Addr() == addr) == on {
			return k
		}
	}
	t.Fatalf("no key %s-* with a slot on %s: %v", prefix, addr, on)
	return ""
}

// goroutines counts the process's goroutines in two kinds: the Redis
// client's per-connection readers and writers (rueidis starts them when a
// connection first carries concurrent commands, so their number follows
// the connections and how busy they have been), and all the others.
func goroutines() (conn, other int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "rueidis.(*pipe)._background") {
			conn++
		} else {
			other++
		}
	}
	return conn, other
}

// settledGoroutines returns goroutines() once the others are at most want,
// or as they are after a few seconds: goroutines that signalled their end
// take a moment to be gone.
func settledGoroutines(want int) (conn, other int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, other = goroutines()
		if other <= want || time.Now().After(deadline) {
			return conn, other
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// percentile returns the p-th percentile (0-100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p/100))]
}
