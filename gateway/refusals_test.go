package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/rules"
)

// TestRefusalsCount runs a client that ignores 429 and sends a request
// every 50 ms against 10 a second, over real Redis, under a rule whose
// refusals count and under one whose refusals are free. Counted, the
// client stays out as long as it keeps sending, and gets in once it stops
// for the time its last 429 said; free, it gets about one request in
// every 100 ms through. A client that waits its Retry-After once passes
// under either.
func TestRefusalsCount(t *testing.T) {
	t.Parallel()
	addr := redistest.Standalone(t).Addr()
	for _, tt := range []struct {
		refusals   rules.Refusals
		wantPassed int // of 60 requests over 3 s after the burst
	}{{rules.RefusalsCount, 0}, {rules.RefusalsFree, 30}} {
		t.Run(string(tt.refusals), func(t *testing.T) {
			clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			store := newRedisStore(t, []string{addr}, clock)
			set, err := rules.Compile(rules.Document{Rules: []rules.Rule{{Scope: rules.ScopeDefault, Refusals: tt.refusals,
				Limits: []rules.Limit{{Name: "s", Rate: 10, Per: rules.Duration(time.Second)}}}}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Store: store, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer srv.Close()
			key := "key-" + string(tt.refusals)
			send := func() (int, time.Duration) {
				resp, body := doURL(t, "GET", srv.URL+"/", "X-API-Key", key)
				var p gateway.Problem
				json.Unmarshal([]byte(body), &p)
				return resp.StatusCode, time.Duration(p.RetryAfterMillis) * time.Millisecond
			}
			for i := range 10 {
				if code, _ := send(); code != 200 {
					t.Fatalf("burst request %d: got %d", i, code)
				}
			}
			// A client that retries once, when told.
			code, wait := send()
			if code != 429 {
				t.Fatalf("after the burst: got %d, want 429", code)
			}
			clock.Advance(wait)
			if code, _ := send(); code != 200 {
				t.Fatalf("retried once after Retry-After %v: got %d, want 200", wait, code)
			}
			// A client that ignores 429: its refusals are charged in the
			// store call that refuses them, not by a second call.
			before := fcalls(t, addr)
			passed := 0
			for range 60 {
				clock.Advance(50 * time.Millisecond)
				code, wait = send()
				if code == 200 {
					passed++
				}
			}
			if passed < tt.wantPassed-2 || passed > tt.wantPassed+2 {
				t.Errorf("ignoring 429 for 3 s: %d of 60 passed, want about %d", passed, tt.wantPassed)
			}
			if calls := fcalls(t, addr) - before; calls != 60 {
				t.Errorf("60 requests: %d Redis calls, want 60 (one each, refused or not)", calls)
			}
			if tt.refusals != rules.RefusalsCount {
				return
			}
			// It stops: after its last 429's wait, it is back; debt is at
			// most one burst, so that wait is at most 1.1 s.
			if wait > 1100*time.Millisecond {
				t.Errorf("last wait %v, want at most 1.1 s (one burst of debt and the request)", wait)
			}
			clock.Advance(wait)
			if code, _ := send(); code != 200 {
				t.Errorf("after stopping for its wait: got %d, want 200", code)
			}
		})
	}
}

// fcalls returns how many takes (FCALL or EVALSHA) the Redis at addr has
// run, by INFO commandstats.
func fcalls(t *testing.T, addr string) int64 {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Do(t.Context(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_fcall:calls=", "cmdstat_evalsha:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				n += k
			}
		}
	}
	return n
}
