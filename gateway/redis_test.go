package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// redisBackends are the Redis deployments the gateway is tested against;
// each returns seed addresses of a server started for the test.
var redisBackends = []struct {
	name  string
	addrs func(t *testing.T) []string
}{
	{"standalone", func(t *testing.T) []string { return []string{redistest.Standalone(t).Addr()} }},
	{"cluster", func(t *testing.T) []string { return redistest.StartCluster(t, 3, 0).Addrs() }},
}

// newRedisStore connects a store of its own to addrs, on clock's time when
// clock is not nil.
func newRedisStore(t *testing.T, addrs []string, clock *limittest.Clock) *redisstore.Store {
	t.Helper()
	cfg := redisstore.Config{Addrs: addrs}
	if clock != nil {
		cfg.Now = clock.Now
	}
	s, err := redisstore.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestRedis(t *testing.T) {
	for _, be := range redisBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			addrs := be.addrs(t)
			t.Run("ExactBurstAcrossTwoLimiters", func(t *testing.T) { testExactBurstAcrossTwoLimiters(t, addrs) })
			t.Run("HeadersOfASequence", func(t *testing.T) { testRedisHeaders(t, addrs) })
		})
	}
}

func testExactBurstAcrossTwoLimiters(t *testing.T, addrs []string) {
	// Two gateways, each with its own connections to Redis and Redis's
	// clock, share every key's burst of 10 exactly, however the requests
	// interleave. The bucket refills once an hour, so not during the test.
	const hourly = "rules: [{scope: default, limits: [{name: h, rate: 1, per: 1h, burst: 10}]}]"
	var gws []*testGateway
	for range 2 {
		s := newRedisStore(t, addrs, nil)
		gws = append(gws, newTestGateway(t, hourly, func(c *gateway.Config) { c.Store = s; c.Now = nil }))
	}
	const burst, perKey, clients = 10, 24, 4
	keys := []string{"red-1", "red-2", "red-3", "red-4"}
	var mu sync.Mutex
	allowed, refused := map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perKey / clients {
				for _, k := range keys {
					req, _ := http.NewRequest("GET", gws[(c+i)%2].srv.URL+"/", nil)
					req.Header.Set("X-API-Key", k)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					mu.Lock()
					switch resp.StatusCode {
					case 200:
						allowed[k]++
					case 429:
						refused[k]++
					default:
						t.Errorf("key %s: status %d, want 200 or 429", k, resp.StatusCode)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		if allowed[k] != burst || refused[k] != perKey-burst {
			t.Errorf("key %s over two limiters: %d allowed, %d refused; want exactly %d and %d",
				k, allowed[k], refused[k], burst, perKey-burst)
		}
	}
}

func testRedisHeaders(t *testing.T, addrs []string) {
	// The same sequence as TestHeadersOfASequence, counted in Redis on a
	// stopped test clock: the headers must not depend on the store.
	clock := limittest.NewClock(start)
	s := newRedisStore(t, addrs, clock)
	g := newTestGateway(t, testRules, func(c *gateway.Config) { c.Store = s; c.Now = clock.Now })
	key := fmt.Sprintf("redis-seq-%s", t.Name())
	for i := 1; i <= 10; i++ {
		resp, _ := g.do(t, "GET", "/", "X-API-Key", key)
		reset := (200*i + 999) / 1000
		want := [5]string{`"s";q=10;w=2`, fmt.Sprintf(`"s";r=%d;t=%d`, 10-i, reset), "10", fmt.Sprint(10 - i), fmt.Sprint(reset)}
		if got := rateHeaders(resp.Header); resp.StatusCode != 200 || got != want {
			t.Errorf("request %d: status %d headers %q, want 200 %q", i, resp.StatusCode, got, want)
		}
	}
	resp, body := g.do(t, "GET", "/", "X-API-Key", key)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("request 11: status %d Retry-After %q, want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if p := decodeProblem(t, resp, body); p.RetryAfterMillis != 200 || p.Limit != "s" {
		t.Errorf("problem %+v, want limit s and retry_after_ms 200", p)
	}
}

// shadowRules enforce s and try a much tighter s out in shadow; neither
// refills a token during a test.
const shadowRules = `
rules:
  - scope: default
    limits: [{name: s, rate: 100, per: 1h, burst: 100}]
  - scope: default
    mode: shadow
    limits: [{name: s, rate: 5, per: 1h, burst: 5}]
`

// takeCalls is how many takes a server has run: the FCALL and EVALSHA
// calls of INFO commandstats (the commands a take runs inside count
// apart).
func takeCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	v, err := srv.Do(t.Context(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := v.(string)
	var n int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || name != "cmdstat_fcall" && name != "cmdstat_evalsha" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestShadowOneRedisCall runs the production stack (leases over the guard
// over Redis) under an enforced limit and a shadow one of the same name:
// each request costs Redis one call, the shadow limit's verdicts are
// exact, and it spends none of the enforced limit's tokens.
func TestShadowOneRedisCall(t *testing.T) {
	srv := redistest.Standalone(t)
	p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}},
		Guard: guard.Config{Timeout: time.Second}, Fleet: limit.Fleet{Gateways: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	g := newTestGateway(t, shadowRules, func(c *gateway.Config) { c.Store = p; c.Now = nil })
	before := takeCalls(t, srv)
	const n = 20
	for i := range n {
		resp, _ := g.do(t, "GET", "/", "X-API-Key", "one-call")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(99-i) {
			t.Fatalf("request %d: status %d remaining %q, want 200 and %d (the shadow s spends none of the enforced s)",
				i+1, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), 99-i)
		}
	}
	if got := takeCalls(t, srv) - before; got != n {
		t.Errorf("Redis ran %d takes for %d requests, want %d: one call per request, shadow limits in it", got, n, n)
	}
	for _, tt := range []struct {
		outcome string
		want    float64
	}{{"shadow_allowed", 5}, {"shadow_refused", n - 5}, {"allowed", n}} {
		if got := testutil.ToFloat64(mustCounter(t, g.reg, tt.outcome, "s")); got != tt.want {
			t.Errorf("decisions{outcome=%q,limit=s} = %v, want %v", tt.outcome, got, tt.want)
		}
	}
}
