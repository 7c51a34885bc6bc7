package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// target is a Redis deployment the tests run against.
type target struct {
	name  string
	addrs func() []string
}

var targets = []target{
	{"Standalone", func() []string { return []string{standalone.Addr()} }},
	{"Cluster", func() []string { return cluster.Addrs() }},
}

// newStore connects a store for the test or benchmark and closes it when
// that ends.
func newStore(tb testing.TB, cfg redisstore.Config) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.New(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("New(%v): %v", cfg.Addrs, err)
	}
	tb.Cleanup(s.Close)
	return s
}

// uniqueKey returns a request key no other test uses, so that tests may
// share the package's servers.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), rand.Uint64())
}

func take(t *testing.T, s limit.Store, req *limit.Request) limit.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take(%q): %v", req.Key, err)
	}
	if want := sourceOf(s); d.Source != want {
		t.Fatalf("Take(%q) = %+v: source %q, want %q", req.Key, d, d.Source, want)
	}
	// The models and memstore it is compared with name other sources.
	d.Source = ""
	return d
}

// sourceOf is the Source s names on its decisions.
func sourceOf(s limit.Store) limit.Source {
	if _, ok := s.(*memstore.Store); ok {
		return limit.FromMemory
	}
	return limit.FromRedis
}

func perSecond(name string, rate, burst int64) limit.Limit {
	return limit.Limit{Name: name, Count: rate, Period: time.Second, Burst: burst}
}

func TestConformance(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store {
				return newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: now})
			})
		})
	}
	// The same code run as a script, as on a server before Redis 7.
	t.Run("Standalone/scripts", func(t *testing.T) {
		limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store {
			s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}, Now: now})
			redisstore.UseScripts(s)
			return s
		})
	})
}

// TestRefusalsCount runs the cases of refusals that count on every
// target, and counts the calls: a refused request that counts costs the
// one call that refused it, and a request carrying earlier refusals
// (Request.Refused) one call too.
func TestRefusalsCount(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			limittest.RunRefusals(t, func(t *testing.T, now func() time.Time) limit.Store {
				return newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: now})
			})
		})
	}
	t.Run("OwnClock", func(t *testing.T) {
		s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
		l := limit.Limit{Name: "s", Count: 1, Period: time.Minute, Burst: 2, CountRefusals: true}
		req := &limit.Request{Key: uniqueKey(t), Cost: 2, Limits: []limit.Limit{l}}
		take(t, s, req)
		req.Cost = 1
		before := readStats(t).calls
		for i := range 5 {
			if d := take(t, s, req); d.Allowed || d.RetryAfter < time.Minute {
				t.Fatalf("retry %d of an empty bucket of 1 a minute: %+v, want refused with at least a minute to wait", i+1, d)
			}
		}
		if calls := readStats(t).calls - before; calls != 5 {
			t.Errorf("5 refused requests that count: %v script calls, want 5", calls)
		}
		v, err := standalone.Do(t.Context(), "PTTL", s.RedisKey(req.Key, &l))
		if ttl, _ := v.(int64); err != nil || ttl < 4*60_000-1000 {
			t.Errorf("PTTL after 5 refusals that count: %v, %v; want at least 4 minutes (a burst of debt, then the bucket's fill)", v, err)
		}
	})
}

func TestDetectsMode(t *testing.T) {
	for _, c := range []struct {
		name  string
		addrs []string
		want  bool
	}{
		{"standalone", []string{standalone.Addr()}, false},
		{"one cluster node", cluster.Addrs()[:1], true},
		{"cluster seeds", cluster.Addrs(), true},
	} {
		if got := newStore(t, redisstore.Config{Addrs: c.addrs}).Cluster(); got != c.want {
			t.Errorf("%s: Cluster() got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestExactBurstAcrossGateways spreads one key's requests over several
// stores, each with its own connections, as gateways would: the script's
// atomicity alone must hold the total to the burst.
func TestExactBurstAcrossGateways(t *testing.T) {
	frozen := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clocks := []struct {
		name string
		now  func() time.Time
	}{
		{"FrozenClock", func() time.Time { return frozen }},
		// Redis's clock runs, but at one token an hour it refills nothing
		// while the test runs.
		{"RedisTime", nil},
	}
	const gateways, workers, tries, burst = 4, 32, 20, 100
	for _, tg := range targets {
		for _, clk := range clocks {
			t.Run(tg.name+"/"+clk.name, func(t *testing.T) {
				stores := make([]*redisstore.Store, gateways)
				for i := range stores {
					stores[i] = newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: clk.now})
				}
				req := limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{
					{Name: "h", Count: 1, Period: time.Hour, Burst: burst},
					{Name: "s", Count: 1000, Period: time.Second, Burst: 1000},
				}}
				var admitted, refused atomic.Int64
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						r := req
						for i := range tries {
							d, err := stores[(w+i)%gateways].Take(t.Context(), &r)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							} else {
								refused.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if got := admitted.Load(); got != burst {
					t.Errorf("%d requests over %d gateways on a burst of %d: %d admitted, want exactly %d", workers*tries, gateways, burst, got, burst)
				}
				if got := admitted.Load() + refused.Load(); got != workers*tries {
					t.Errorf("answered %d requests, want %d", got, workers*tries)
				}
			})
		}
	}
}

// TestRefillByRedisClock lets Redis's own clock refill a bucket: a refused
// request becomes allowed by waiting, and the store never admits more than
// the burst plus the rate times the time that passed.
func TestRefillByRedisClock(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			s := newStore(t, redisstore.Config{Addrs: tg.addrs()})
			const rate, burst = 20, 2 // a token every 50ms
			req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", rate, burst)}}
			began := time.Now()
			admitted := 0
			for range burst {
				if take(t, s, req).Allowed {
					admitted++
				}
			}
			d := take(t, s, req)
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Second/rate {
				t.Fatalf("after the burst: allowed %v retry %v, want refused with at most 50ms to wait", d.Allowed, d.RetryAfter)
			}
			refills := 0
			for time.Since(began) < 600*time.Millisecond {
				if take(t, s, req).Allowed {
					admitted++
					refills++
				}
				time.Sleep(5 * time.Millisecond)
			}
			elapsed := time.Since(began)
			if refills == 0 {
				t.Errorf("no token refilled in %v at %d/s", elapsed, rate)
			}
			if most := burst + int(elapsed.Milliseconds()*rate/1000); admitted > most {
				t.Errorf("admitted %d in %v, want at most %d (burst %d + %d/s)", admitted, elapsed, most, burst, rate)
			}
		})
	}
}

// TestAcrossPrimaries runs multi-limit requests for a few hundred keys on
// the cluster: none fails (no CROSSSLOT), the keys reach every primary, and
// each bucket sits on the node serving the slot of its own hash tag.
func TestAcrossPrimaries(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: cluster.Addrs()})
	ctx := t.Context()
	// Slow refills, so that every bucket outlives the EXISTS below on a
	// loaded machine: a take of 2 keeps each for 12 s or more.
	limits := []limit.Limit{{Name: "s", Count: 10, Period: time.Minute, Burst: 20}, {Name: "m", Count: 600, Period: time.Hour}, {Name: "d", Count: 10000, Period: 24 * time.Hour, Algorithm: limit.TokenBucket}}
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	base := uniqueKey(t)
	for i := range 300 {
		key := fmt.Sprintf("%s-%d", base, i)
		req := &limit.Request{Key: key, Cost: 2, Limits: limits}
		if d := take(t, s, req); !d.Allowed || d.Remaining != 18 {
			t.Fatalf("key %q: allowed %v remaining %d, want allowed with 18 left", key, d.Allowed, d.Remaining)
		}
		owner, err := cluster.NodeForSlot(ctx, int(redisstore.Slot(key)))
		if err != nil {
			t.Fatal(err)
		}
		perNode[owner.Addr()]++
		if got := s.NodeAddr(redisstore.Slot(key)); got != owner.Addr() {
			t.Errorf("NodeAddr(Slot(%q)): got %s, want %s", key, got, owner.Addr())
		}
		for j := range limits {
			// EXISTS straight to the owner: a bucket elsewhere would answer MOVED.
			if n, err := owner.Do(ctx, "EXISTS", s.RedisKey(key, &limits[j])); err != nil || n != int64(1) {
				t.Fatalf("EXISTS %s on %s: got %v, %v, want 1", s.RedisKey(key, &limits[j]), owner.Addr(), n, err)
			}
		}
	}
	for _, p := range primaries {
		if perNode[p.Addr()] == 0 {
			t.Errorf("primary %s got none of 300 keys (spread %v)", p.Addr(), perNode)
		}
	}
}

// hostileKeys are request keys a client could send to reach another key's
// bucket or to pick its own slot.
var hostileKeys = []string{
	"", "a", "a}", "{a}", "a:s", "a:s:token_bucket:1000", "}{", "{", "}", "{}", " ", "a b",
	"\x00", "a\x00b", "\xff\xfe", "k\n", "k\r\n", "ключ", "{user1000}.following", "user1000",
	"=user1000", "%user1000", "%", "=", "sl:{=a}:s:token_bucket:1000", "a}:s:token_bucket:1000",
	"%25", "%2", "%7B", "k:user1000", "k:user1000}:s:token_bucket:1000", "ip:203.0.113.7", "ip:2001:db8::1",
	strings.Repeat("a", 4096), strings.Repeat("{", 4096), string(make([]byte, 4096)),
}

func TestHostileKeys(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: cluster.Addrs()})
	ctx := t.Context()
	prefix := uniqueKey(t)
	l := perSecond("s", 1, 3)
	for _, k := range hostileKeys {
		// The first request of each key takes 1 of 3 tokens; a later key
		// sharing its bucket would see fewer.
		req := &limit.Request{Key: prefix + k, Limits: []limit.Limit{l}}
		if d := take(t, s, req); !d.Allowed || d.Remaining != 2 {
			t.Errorf("key %q: first request allowed %v remaining %d, want allowed with 2 left (shares a bucket?)", trim(k), d.Allowed, d.Remaining)
		}
	}
	for _, k := range hostileKeys {
		key := prefix + k
		rkey := s.RedisKey(key, &l)
		got, err := cluster.KeySlot(ctx, rkey)
		if err != nil {
			t.Fatal(err)
		}
		if want := redisstore.Slot(key); got != int(want) {
			t.Errorf("key %q: Redis puts %q in slot %d, want %d, the slot of its own tag", trim(k), trim(rkey), got, want)
		}
		owner, err := cluster.NodeForSlot(ctx, got)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := owner.Do(ctx, "GET", rkey); err != nil || v == nil {
			t.Errorf("key %q: GET %q on its slot's node: got %v, %v, want its state", trim(k), trim(rkey), v, err)
		}
	}
}

// trim shortens a key for a failure message.
func trim(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%.40s...(%d bytes)", s, len(s))
	}
	return s
}

// TestReloadsAfterFlush empties every node of functions and scripts, as a
// restart without persistence does, and checks that takes go on: a node
// that says it has no such function gets the take as a script meanwhile
// and the library again in the background, and the script is sent again
// by rueidis on NOSCRIPT.
func TestReloadsAfterFlush(t *testing.T) {
	for _, tg := range targets {
		for _, mode := range []string{"functions", "scripts"} {
			t.Run(tg.name+"/"+mode, func(t *testing.T) {
				s := newStore(t, redisstore.Config{Addrs: tg.addrs()})
				if !redisstore.UsesFunctions(s) {
					t.Fatalf("redis %v: the store did not load its function library", tg.addrs())
				}
				if mode == "scripts" {
					redisstore.UseScripts(s)
				}
				req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", 1, 10)}}
				take(t, s, req)
				nodes := []*redistest.Server{standalone}
				if tg.name == "Cluster" {
					nodes = cluster.Nodes()
				}
				for _, n := range nodes {
					for _, cmd := range [][]string{{"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}} {
						if _, err := n.Do(t.Context(), cmd...); err != nil {
							t.Fatal(err)
						}
					}
				}
				for i, want := range []int64{8, 7} {
					if d := take(t, s, req); !d.Allowed || d.Remaining != want {
						t.Errorf("take %d after a flush: allowed %v remaining %d, want allowed with %d left", i+1, d.Allowed, d.Remaining, want)
					}
				}
				if g, d, err := s.TakeUpTo(t.Context(), req, 3); err != nil || g != 3 || d.Remaining != 4 {
					t.Errorf("TakeUpTo 3 after a flush: granted %d, remaining %d, error %v; want 3 and 4", g, d.Remaining, err)
				}
				if mode == "scripts" {
					return
				}
				// The library comes back on the node that answered "Function
				// not found", in the background.
				owner := standalone
				if tg.name == "Cluster" {
					var err error
					if owner, err = cluster.NodeForSlot(t.Context(), int(redisstore.Slot(req.Key))); err != nil {
						t.Fatal(err)
					}
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					v, err := owner.Do(t.Context(), "FUNCTION", "LIST", "LIBRARYNAME", "sluice_*")
					if libs, ok := v.([]any); err == nil && ok && len(libs) > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("FUNCTION LIST on %s 5s after the flush: %v, %v; want the library back", owner.Addr(), v, err)
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}
}

// TestBucketExpiresWhenFull checks the TTL the script gives a bucket: a
// bucket lives until it would be full again, then Redis drops it.
func TestBucketExpiresWhenFull(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	ctx := t.Context()
	l := perSecond("s", 10, 10) // a token every 100ms
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{l}}
	rkey := s.RedisKey(req.Key, &l)
	pttl := func() int64 {
		t.Helper()
		v, err := standalone.Do(ctx, "PTTL", rkey)
		if err != nil {
			t.Fatal(err)
		}
		return v.(int64)
	}
	if got := pttl(); got != -2 {
		t.Fatalf("PTTL before any take: got %d, want -2 (no key)", got)
	}
	req.Cost = 3
	d := take(t, s, req)
	if got := pttl(); got <= 0 || got > 300 {
		t.Errorf("PTTL after taking 3 of 10 at 10/s: got %d ms, want 1..300", got)
	}
	if d.ResetAfter != 300*time.Millisecond {
		t.Errorf("reset after %v, want 300ms", d.ResetAfter)
	}
	deadline := time.Now().Add(2 * time.Second)
	for pttl() != -2 {
		if time.Now().After(deadline) {
			t.Fatalf("bucket still there 2s after a 300ms TTL (PTTL %d)", pttl())
		}
		time.Sleep(10 * time.Millisecond)
	}
	req.Cost = 1
	if d := take(t, s, req); !d.Allowed || d.Remaining != 9 {
		t.Errorf("after expiry: allowed %v remaining %d, want a full bucket (9 left)", d.Allowed, d.Remaining)
	}

	// A refused request writes nothing, so it sets no TTL either.
	empty := &limit.Request{Key: uniqueKey(t), Cost: 11, Limits: []limit.Limit{l}}
	take(t, s, empty)
	if v, err := standalone.Do(ctx, "EXISTS", s.RedisKey(empty.Key, &l)); err != nil || v != int64(0) {
		t.Errorf("EXISTS after a refused first request: got %v, %v, want 0", v, err)
	}
}

// TestTestClockKeepsStates checks the one difference of the test clock:
// Redis expires keys in real time, so states are kept ten minutes longer
// than their TTL, which changes no answer.
func TestTestClockKeepsStates(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}, Now: func() time.Time { return now }})
	l := perSecond("s", 10, 10)
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{l}}
	take(t, s, req)
	v, err := standalone.Do(t.Context(), "PTTL", s.RedisKey(req.Key, &l))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(int64); got <= 600000 || got > 600100 {
		t.Errorf("PTTL under a test clock: got %d ms, want the 100ms TTL plus 600000", got)
	}
}

// TestMatchesMemstore sends the same random requests through the
// in-process store and the Redis store and requires the same decision at
// every step: random keys, costs, times and one to three limits of every
// algorithm, some of them at the edges of exact arithmetic.
func TestMatchesMemstore(t *testing.T) {
	pool := []limit.Limit{
		{Name: "s", Count: 7, Period: time.Second, Burst: 11},
		{Name: "m", Count: 50, Period: time.Minute},
		{Name: "t", Count: 3, Period: 250 * time.Millisecond, Burst: 4},
		{Name: "h", Count: 1, Period: time.Hour, Burst: 3},
		{Name: "ms", Count: 1, Period: time.Millisecond, Burst: 5},
		{Name: "day", Count: 1_000_003, Period: 24 * time.Hour, Burst: 7},
		// burst × period just under 2^53: the largest credits Lua holds exactly.
		{Name: "big", Count: 999_983, Period: time.Second, Burst: 9_007_199_254_740},
		{Name: "odd", Count: 9_999_991, Period: 999 * time.Millisecond, Burst: 3},
		{Name: "gc", Count: 5, Period: time.Second, Burst: 8, Algorithm: limit.GCRA},
		{Name: "gct", Count: 3, Period: 250 * time.Millisecond, Burst: 4, Algorithm: limit.GCRA},
		{Name: "fw", Count: 10, Period: time.Minute, Algorithm: limit.FixedWindow},
		{Name: "sw", Count: 6, Period: time.Second, Algorithm: limit.SlidingWindow},
		{Name: "sl", Count: 4, Period: 700 * time.Millisecond, Algorithm: limit.SlidingLog},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			mem := memstore.New(memstore.Config{Now: clk.Now})
			red := newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: clk.Now})
			rng := rand.New(rand.NewPCG(3, uint64(len(tg.name))))
			keys := []string{uniqueKey(t) + "a", uniqueKey(t) + "{b}", uniqueKey(t) + "\x00c"}
			for step := range 3000 {
				switch r := rng.IntN(100); {
				case r < 2:
					clk.Advance(time.Duration(rng.IntN(48)) * time.Hour)
				case r < 70:
					clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				}
				order := rng.Perm(len(pool))[:1+rng.IntN(3)]
				limits := make([]limit.Limit, len(order))
				for i, j := range order {
					limits[i] = pool[j]
					// A third of them tried out in shadow.
					limits[i].Shadow = rng.IntN(3) == 0
				}
				if rng.IntN(4) == 0 {
					// The first one again, the other way round: its shadow
					// and enforced buckets must keep apart. (Not at another
					// burst: the stores drop a state at different times
					// after its TTL, see limit.Limit, and a state one
					// burst wrote and another reads would tell them apart.)
					l := limits[0]
					l.Shadow = !l.Shadow
					limits = append(limits, l)
				}
				cost := int64(1 + rng.IntN(4))
				switch rng.IntN(20) {
				case 0:
					cost = 12
				case 1:
					cost = 1 << 62
				case 2:
					cost = 1_000_000_000_000
				}
				req := &limit.Request{Key: keys[rng.IntN(len(keys))], Cost: cost, Limits: limits}
				want := take(t, mem, req)
				got := take(t, red, req)
				if got != want {
					t.Fatalf("step %d (cost %d, limits %v): redis %+v, memory %+v", step, cost, names(limits), got, want)
				}
			}
		})
	}
}

func names(ls []limit.Limit) []string {
	out := make([]string, len(ls))
	for i := range ls {
		out[i] = ls[i].Name
		if ls[i].Shadow {
			out[i] += " (shadow)"
		}
	}
	return out
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  redisstore.Config
		want error // nil: any error
	}{
		{"no address", redisstore.Config{}, nil},
		{"bad address", redisstore.Config{Addrs: []string{"localhost"}}, nil},
		{"brace in prefix", redisstore.Config{Addrs: []string{standalone.Addr()}, Prefix: "a{b"}, nil},
		{"negative timeout", redisstore.Config{Addrs: []string{standalone.Addr()}, ConnTimeout: -1}, nil},
	} {
		s, err := redisstore.New(t.Context(), c.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: New succeeded, want an error", c.name)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: got error %v, want %v", c.name, err, c.want)
		}
	}
}

func TestPassword(t *testing.T) {
	srv := redistest.Standalone(t)
	if _, err := srv.Do(t.Context(), "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if s, err := redisstore.New(t.Context(), redisstore.Config{Addrs: []string{srv.Addr()}}); err == nil {
		s.Close()
		t.Error("New without the password succeeded, want an error")
	}
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}, Password: "s3cret"})
	if d := take(t, s, &limit.Request{Key: "k", Limits: []limit.Limit{perSecond("s", 1, 1)}}); !d.Allowed {
		t.Error("first request with the password: refused, want allowed")
	}
}

// TestErrors checks that a caller can tell why a Take failed.
func TestErrors(t *testing.T) {
	srv := redistest.Standalone(t)
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}})
	l := perSecond("s", 1, 1)
	ok := &limit.Request{Key: "k", Limits: []limit.Limit{l}}
	take(t, s, ok)

	// The store takes requests as valid (limit.Store) and refuses only
	// what would make it fail, before any I/O, or corrupt a state, in the
	// script: both match limit.ErrInvalid.
	t.Run("InvalidRequest", func(t *testing.T) {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := s.Take(ctx, &limit.Request{Key: "k"})
		srv.Cont()
		if !errors.Is(err, limit.ErrInvalid) {
			t.Errorf("a request without limits to a stopped server: got %v, want limit.ErrInvalid without I/O", err)
		}
		for _, bad := range []limit.Limit{
			{Name: "s", Count: 0, Period: time.Second},
			{Name: "s", Count: 1, Period: time.Microsecond},
			{Name: "s", Count: 1 << 52, Period: time.Second},
		} {
			if _, err := s.Take(t.Context(), &limit.Request{Key: "k", Limits: []limit.Limit{bad}}); !errors.Is(err, limit.ErrInvalid) {
				t.Errorf("limit %+v: got %v, want limit.ErrInvalid from the script's guard", bad, err)
			}
		}
	})

	// A foreign value under a store's key is Redis answering, not an
	// outage: ErrReply, for Take and TakeUpTo, under every algorithm.
	t.Run("ReplyError", func(t *testing.T) {
		for _, alg := range limit.Algorithms {
			l := limit.Limit{Name: "s", Count: 1, Period: time.Second, Algorithm: alg}
			for _, c := range []struct {
				name string
				set  []string // a command that puts a foreign value in the bucket; the key goes second
				want string   // part of the error
			}{
				{"foreign string", []string{"SET", "", "not a bucket"}, "malformed state"},
				{"wrong type", []string{"HSET", "", "f", "v"}, "WRONGTYPE"},
			} {
				if alg == limit.SlidingLog && c.name == "foreign string" {
					c.want = "WRONGTYPE" // LLEN of a string
				}
				key := fmt.Sprintf("r:%s:%s", alg, c.name)
				req := &limit.Request{Key: key, Limits: []limit.Limit{l}}
				c.set[1] = s.RedisKey(key, &l)
				if _, err := srv.Do(t.Context(), c.set...); err != nil {
					t.Fatal(err)
				}
				_, err := s.Take(t.Context(), req)
				if !errors.Is(err, redisstore.ErrReply) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: Take with a %s in its bucket: got %v, want ErrReply with %q", alg, c.name, err, c.want)
				}
				_, _, err = s.TakeUpTo(t.Context(), req, 5)
				if !errors.Is(err, redisstore.ErrReply) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: TakeUpTo with a %s in its bucket: got %v, want ErrReply with %q", alg, c.name, err, c.want)
				}
			}
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		defer srv.Cont()
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := s.Take(ctx, &limit.Request{Key: "t", Limits: []limit.Limit{l}})
		if !errors.Is(err, redisstore.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("stopped server, 100ms deadline: got %v, want ErrTimeout wrapping context.DeadlineExceeded", err)
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := s.Take(ctx, &limit.Request{Key: "c", Limits: []limit.Limit{l}})
		if !errors.Is(err, context.Canceled) || errors.Is(err, redisstore.ErrTimeout) || errors.Is(err, redisstore.ErrUnavailable) {
			t.Errorf("cancelled context: got %v, want context.Canceled only", err)
		}
	})

	t.Run("Unavailable", func(t *testing.T) {
		srv.Kill()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := s.Take(ctx, &limit.Request{Key: "u", Limits: []limit.Limit{l}})
		if !errors.Is(err, redisstore.ErrUnavailable) {
			t.Errorf("killed server: got %v, want ErrUnavailable", err)
		}
	})

	t.Run("Closed", func(t *testing.T) {
		s.Close()
		_, err := s.Take(t.Context(), ok)
		if !errors.Is(err, redisstore.ErrUnavailable) {
			t.Errorf("closed store: got %v, want ErrUnavailable", err)
		}
	})
}

func TestNodeAddr(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	for _, slot := range []uint16{0, 1, 8000, 16383} {
		if got := s.NodeAddr(slot); got != standalone.Addr() {
			t.Errorf("standalone NodeAddr(%d): got %q, want %s", slot, got, standalone.Addr())
		}
	}
	if got := s.NodeAddr(16384); got != "" {
		t.Errorf("NodeAddr(16384), past the last slot: got %q, want empty", got)
	}
	c := newStore(t, redisstore.Config{Addrs: cluster.Addrs()})
	for _, slot := range []uint16{0, 5460, 5461, 10922, 10923, 16383} {
		want, err := cluster.NodeForSlot(t.Context(), int(slot))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.NodeAddr(slot); got != want.Addr() {
			t.Errorf("cluster NodeAddr(%d): got %q, want %s", slot, got, want.Addr())
		}
	}
}

// TestSlotMatchesRedis compares Slot with CLUSTER KEYSLOT of the keys the
// store writes, for random byte strings: Redis itself must agree.
func TestSlotMatchesRedis(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: cluster.Addrs()})
	rng := rand.New(rand.NewPCG(5, 6))
	l := perSecond("s", 1, 1)
	for i := range 300 {
		b := make([]byte, rng.IntN(70))
		for j := range b {
			b[j] = byte(rng.IntN(256))
			if i%2 == 0 { // half the keys from the literal alphabet
				b[j] = "abcXYZ019._~-"[rng.IntN(13)]
			}
		}
		key := string(b)
		got, err := cluster.KeySlot(t.Context(), s.RedisKey(key, &l))
		if err != nil {
			t.Fatal(err)
		}
		if want := redisstore.Slot(key); got != int(want) {
			t.Errorf("key %q: CLUSTER KEYSLOT %d, Slot %d", key, got, want)
		}
	}
}

// TestScriptsWhenFunctionsRefused connects as an ACL user who may not load
// functions, as on a managed Redis with a narrow user: the store runs its
// takes as scripts, and they answer as ever.
func TestScriptsWhenFunctionsRefused(t *testing.T) {
	srv := redistest.Standalone(t)
	if _, err := srv.Do(t.Context(), "ACL", "SETUSER", "gateway", "on", ">s3cret", "~*", "&*", "+@all", "-function"); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}, Username: "gateway", Password: "s3cret"})
	if redisstore.UsesFunctions(s) {
		t.Fatal("a user refused FUNCTION LOAD: the store says it calls functions, want scripts")
	}
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", 1, 3)}}
	for i, want := range []int64{2, 1} {
		if d := take(t, s, req); !d.Allowed || d.Remaining != want {
			t.Errorf("take %d: allowed %v remaining %d, want allowed with %d left", i+1, d.Allowed, d.Remaining, want)
		}
	}
}
