package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

func newPipeline(t *testing.T, cfg pipeline.Config) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// calm is a Redis deadline no loaded test machine misses while Redis
// answers, for tests of what the layers do rather than of outages: the
// redis-server they start shares the machine's cores with every other test.
const calm = time.Second

func TestLayers(t *testing.T) {
	srv := redistest.Standalone(t)
	redis := redisstore.Config{Addrs: []string{srv.Addr()}}
	quiet := limit.Limit{Name: "s", Count: 10, Period: time.Second}
	busy := limit.Limit{Name: "s", Count: 100_000, Period: time.Second}
	for _, tc := range []struct {
		name     string
		cfg      pipeline.Config
		limits   []limit.Limit
		requests int
		want     map[limit.Source]int
	}{
		{"in process", pipeline.Config{}, []limit.Limit{quiet}, 12, map[limit.Source]int{limit.FromMemory: 12}},
		{"quiet key in redis", pipeline.Config{Redis: redis, Fleet: limit.Fleet{Gateways: 1}, Guard: guard.Config{Timeout: calm}}, []limit.Limit{quiet}, 10, map[limit.Source]int{limit.FromRedis: 10}},
		{"refused key is cached", pipeline.Config{Redis: redis, Fleet: limit.Fleet{Gateways: 1}, Guard: guard.Config{Timeout: calm}}, []limit.Limit{quiet}, 13, map[limit.Source]int{limit.FromRedis: 11, limit.FromRefusalCache: 2}},
		{"busy key is leased", pipeline.Config{Redis: redis, Fleet: limit.Fleet{Gateways: 1}, Guard: guard.Config{Timeout: calm}}, []limit.Limit{busy}, 200, nil},
		{"no leases", pipeline.Config{Redis: redis, Fleet: limit.Fleet{Gateways: 1}, Guard: guard.Config{Timeout: calm}, NoLeases: true}, []limit.Limit{busy}, 200, map[limit.Source]int{limit.FromRedis: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, tc.cfg)
			if (p.Redis() != nil) != (len(tc.cfg.Redis.Addrs) > 0) {
				t.Fatalf("Redis() = %v with addresses %v", p.Redis(), tc.cfg.Redis.Addrs)
			}
			req := &limit.Request{Key: "k:" + strings.ReplaceAll(t.Name(), "/", "-"), Limits: tc.limits}
			got := map[limit.Source]int{}
			for range tc.requests {
				d, err := p.Take(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				got[d.Source]++
			}
			if tc.want == nil {
				// A busy key: after the first batch, leased tokens.
				if got[limit.FromLease] < tc.requests/2 {
					t.Errorf("sources %v: want most answers from %s", got, limit.FromLease)
				}
				return
			}
			for src, n := range tc.want {
				if got[src] != n {
					t.Errorf("sources %v, want %v", got, tc.want)
					break
				}
			}
		})
	}
}

// TestConfigRejected: a fleet given twice, or a negative one, is an error
// naming the field, in process as over Redis.
func TestConfigRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pipeline.Config
		want string
	}{
		{"negative fleet", pipeline.Config{Fleet: limit.Fleet{Gateways: -1}}, "-1 gateways"},
		{"fleet given to the guard", pipeline.Config{Guard: guard.Config{Fleet: limit.Fleet{Gateways: 3}}}, "Guard.Fleet"},
		{"fleet given to the leases", pipeline.Config{Lease: lease.Config{Fleet: limit.Fleet{Count: func() int { return 3 }}}}, "Lease.Fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pipeline.New(t.Context(), tc.cfg)
			if err == nil {
				p.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %q, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestInvalidRequests: the pipeline validates each request once, on top:
// one that is not valid is an error matching limit.ErrInvalid, whether its
// key is quiet or busy (leased, where the layers below would answer from
// memory without checking it), and takes nothing.
func TestInvalidRequests(t *testing.T) {
	srv := redistest.Standalone(t)
	p := newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 1},
		Guard: guard.Config{Timeout: calm}})
	// Slow enough to refill that two requests in a row see one token go.
	ok := limit.Limit{Name: "h", Count: 1000, Period: time.Hour}
	for _, tc := range []struct {
		name string
		req  limit.Request
	}{
		{"no limits", limit.Request{}},
		{"negative cost", limit.Request{Cost: -1, Limits: []limit.Limit{ok}}},
		{"a limit named twice", limit.Request{Limits: []limit.Limit{ok, {Name: "h", Count: 5, Period: time.Second}}}},
		{"a zero rate", limit.Request{Limits: []limit.Limit{{Name: "s", Period: time.Second}}}},
	} {
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, map[bool]string{false: ", quiet key", true: ", busy key"}[busy]), func(t *testing.T) {
				key := "k:" + strings.ReplaceAll(t.Name(), "/", "-")
				valid := limit.Request{Key: key, Limits: []limit.Limit{ok}}
				var before limit.Decision
				for range map[bool]int{false: 1, true: 50}[busy] {
					d, err := p.Take(t.Context(), &valid)
					if err != nil {
						t.Fatal(err)
					}
					before = d
				}
				bad := tc.req
				bad.Key = key
				if _, err := p.Take(t.Context(), &bad); !errors.Is(err, limit.ErrInvalid) {
					t.Errorf("got error %v, want one matching limit.ErrInvalid", err)
				}
				d, err := p.Take(t.Context(), &valid)
				if err != nil || d.Remaining < before.Remaining-1 {
					t.Errorf("next valid request: %+v, %v; want %d remaining, as if the invalid one were never asked", d, err, before.Remaining-1)
				}
			})
		}
	}
}

// TestFleetCountsItself: gateways told no fleet size count the ones that
// share their Redis, for their leases and their local limits during an
// outage, and notice one that stops. A gateway told its size, by
// --gateways or the rules service, takes that and writes nothing.
func TestFleetCountsItself(t *testing.T) {
	srv := redistest.Standalone(t)
	redis := redisstore.Config{Addrs: []string{srv.Addr()}}
	fleetOf := func(p *pipeline.Pipeline) int {
		if f := p.Guard().Config().Fleet.Count; f != nil {
			return f()
		}
		return 0
	}
	var logs bytes.Buffer
	first := newPipeline(t, pipeline.Config{Redis: redis, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if got := fleetOf(first); got != 1 {
		t.Errorf("one gateway, counted at start: fleet %d, want 1", got)
	}
	if strings.Contains(logs.String(), "fleet size not given") {
		t.Errorf("warned of no fleet size with the count at hand:\n%s", logs.String())
	}
	told := newPipeline(t, pipeline.Config{Redis: redis, Fleet: limit.Fleet{Gateways: 5}})
	followed := newPipeline(t, pipeline.Config{Redis: redis, Fleet: limit.Fleet{Count: func() int { return 7 }}})
	second, err := pipeline.New(t.Context(), pipeline.Config{Redis: redis})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	third := newPipeline(t, pipeline.Config{Redis: redis})
	counting := []*pipeline.Pipeline{first, second, third}
	until := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var got []int
			agree := true
			for _, p := range counting {
				got = append(got, fleetOf(p))
				agree = agree && got[len(got)-1] == want
			}
			if agree {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("fleets %v after 10 s, want %d each", got, want)
			}
		}
	}
	until(3)
	counting = []*pipeline.Pipeline{first, third}
	second.Close()
	until(2)
	if got := told.Guard().Config().Fleet.Gateways; got != 5 {
		t.Errorf("--gateways 5: fleet %d, want 5", got)
	}
	if got := fleetOf(followed); got != 7 {
		t.Errorf("following the rules service: fleet %d, want its 7", got)
	}
	if _, err := pipeline.New(t.Context(), pipeline.Config{Redis: redis, Fleet: limit.Fleet{Gateways: -1}}); err == nil {
		t.Error("-1 gateways accepted")
	}
}

// TestBusyGatewayKeepsSharedLimits saturates the process's scheduler (a
// spinning goroutine per core) while three gateways' pipelines, with the
// default deadline, race 24 clients for one key's 50 tokens on a healthy
// Redis. Every answer must still come from Redis, a lease or the refusal
// cache: no breaker opens, nothing is guessed locally, and exactly the
// bucket's 50 requests pass.
//
// The spinning threads run at the lowest OS priority: they hold every Go
// processor, as a gateway's own busy goroutines would, but they must not
// take the CPU from the redis-server beside them, which in production runs
// on machines of its own; for the same reason redis-server runs at a
// raised priority, ahead of the other tests sharing the machine.
func TestBusyGatewayKeepsSharedLimits(t *testing.T) {
	srv := redistest.Standalone(t)
	if err := srv.Favour(); err != nil {
		t.Logf("redis-server runs at equal priority: %v", err)
	}
	regs := make([]*prometheus.Registry, 3)
	gws := make([]*pipeline.Pipeline, 3)
	for i := range gws {
		regs[i] = prometheus.NewRegistry()
		gws[i] = newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 3}, Registerer: regs[i]})
	}
	stop := make(chan struct{})
	var burners sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		burners.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			lowPriority(t)
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 1_000_000 {
					x += i
				}
			}
		})
	}
	defer func() { close(stop); burners.Wait() }()

	req := limit.Request{Key: "k:race", Limits: []limit.Limit{{Name: "h", Count: 50, Period: time.Hour}}}
	var (
		next    atomic.Int64
		allowed atomic.Int64
		mu      sync.Mutex
		sources = map[limit.Source]int{}
		errs    []error
		clients sync.WaitGroup
	)
	for range 24 {
		clients.Go(func() {
			for {
				i := next.Add(1)
				if i > 300 {
					return
				}
				r := req
				d, err := gws[i%3].Take(context.Background(), &r)
				mu.Lock()
				sources[d.Source]++
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err == nil && d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	clients.Wait()
	t.Logf("sources %v", sources)
	if len(errs) > 0 {
		t.Errorf("%d errors, first: %v", len(errs), errs[0])
	}
	for src, n := range sources {
		switch src {
		case limit.FromRedis, limit.FromLease, limit.FromRefusalCache:
		default:
			t.Errorf("%d answers from %q while Redis was healthy", n, src)
		}
	}
	if got := allowed.Load(); got != 50 {
		t.Errorf("allowed %d of 300 requests for a bucket of 50, want exactly 50", got)
	}
	for i, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "sluice_guard_breaker_opened_total" {
				for _, m := range mf.GetMetric() {
					if v := m.GetCounter().GetValue(); v > 0 {
						t.Errorf("gateway %d: breaker opened %v times on a healthy Redis", i, v)
					}
				}
			}
		}
	}
}

// TestStrayValueIsNotAnOutage puts a foreign value under one key's bucket
// (WRONGTYPE for the script): that key's requests fail, and nothing else
// does: the node's breaker stays closed, and another caller's fail-closed
// limit on the same node is still decided by Redis.
func TestStrayValueIsNotAnOutage(t *testing.T) {
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	p := newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 1}, Guard: guard.Config{Timeout: calm, TripAfter: 2}, Registerer: reg})
	stray := limit.Request{Key: "k:stray", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}}}
	if _, err := srv.Do(t.Context(), "HSET", p.Redis().RedisKey(stray.Key, &stray.Limits[0]), "not", "sluice"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := stray
		_, err := p.Take(t.Context(), &r)
		if !errors.Is(err, limit.ErrBadReply) {
			t.Fatalf("request %d for the key with a stray value: error %v, want one wrapping limit.ErrBadReply", i+1, err)
		}
	}
	login := limit.Request{Key: "k:other", Limits: []limit.Limit{{Name: "login", Count: 5, Period: time.Minute, FailClosed: true}}}
	d, err := p.Take(t.Context(), &login)
	if err != nil || !d.Allowed || d.Source != limit.FromRedis {
		t.Fatalf("another caller's fail-closed login: %+v, %v; want allowed by redis", d, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_guard_breaker_opened_total" {
			continue
		}
		// The series exists at zero from the start; only a count matters.
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() != 0 {
				t.Errorf("the breaker opened over one key's stray value: %v", mf)
			}
		}
	}
}

// TestNodeWideErrorsAreOutages: a node out of memory (OOM) or busy running
// a script (BUSY) cannot serve any key. Its keys are limited locally, as
// in any outage; no request is let through as if one key's data were bad.
func TestNodeWideErrorsAreOutages(t *testing.T) {
	for _, tc := range []struct {
		name      string
		breakNode func(t *testing.T, srv *redistest.Server)
	}{
		{"OOM", func(t *testing.T, srv *redistest.Server) {
			if _, err := srv.Do(t.Context(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
				t.Fatal(err)
			}
		}},
		{"BUSY", func(t *testing.T, srv *redistest.Server) {
			if _, err := srv.Do(t.Context(), "CONFIG", "SET", "busy-reply-threshold", "20"); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				// A script that runs a second: the node answers BUSY meanwhile.
				srv.Do(context.Background(), "EVAL", `local s = redis.call('TIME')[1] while redis.call('TIME')[1] - s < 2 do end return 1`, "0")
			}()
			t.Cleanup(func() { <-done })
			time.Sleep(200 * time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Standalone(t)
			p := newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 1}, Guard: guard.Config{Timeout: calm}, NoLeases: true})
			tc.breakNode(t, srv)
			for i := range 10 {
				req := limit.Request{Key: fmt.Sprintf("k:%d", i), Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}}}
				d, err := p.Take(t.Context(), &req)
				if err != nil || d.Source != limit.FromLocalFallback {
					t.Fatalf("request %d: %+v, %v; want an answer from %s", i+1, d, err, limit.FromLocalFallback)
				}
			}
		})
	}
}

// TestRedisWritesMetric: sluice_redis_writes_total counts the Redis
// client's writes, at least one for each take made one after another.
func TestRedisWritesMetric(t *testing.T) {
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	p := newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 1}, Registerer: reg})
	const takes = 10
	for i := range takes {
		req := limit.Request{Key: fmt.Sprint("k:w", i), Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Hour}}}
		if _, err := p.Take(t.Context(), &req); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64 = -1
	for _, mf := range mfs {
		if mf.GetName() == "sluice_redis_writes_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got < takes {
		t.Errorf("sluice_redis_writes_total = %v after %d takes one after another (-1: no such metric), want at least %d", got, takes, takes)
	}
}
