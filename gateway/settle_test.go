package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// settleRules: an export endpoint estimated at 2 tokens whose upstream
// tells the true cost in X-Cost, under a bucket of 100 that refills one
// token a second (the tests' clock stands still).
const settleRules = `
endpoints:
  - {name: export, path: /v1/export, cost: 2, cost_header: X-Cost}
rules:
  - scope: default
    limits: [{name: s, rate: 1, per: 1s, burst: 100}]
`

// costUpstream answers with the cost in ?cost= as a header, or with
// ?trailer=1 as a trailer after a streamed body.
func costUpstream(t *testing.T) *url.URL {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cost := r.URL.Query().Get("cost")
		if r.URL.Query().Get("trailer") == "" {
			w.Header().Set("X-Cost", cost)
			io.WriteString(w, "rows\n")
			return
		}
		w.Header().Set("Trailer", "X-Cost, X-Other")
		for range 3 {
			io.WriteString(w, "row\n")
			http.NewResponseController(w).Flush()
		}
		w.Header().Set("X-Cost", cost)
		w.Header().Set("X-Other", "kept")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u
}

// settleGateway serves the gateway over store in front of costUpstream.
func settleGateway(t *testing.T, store limit.Store, clock *limittest.Clock) string {
	set, err := rules.Parse("settle.yaml", []byte(settleRules))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Store: store, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Middleware(gateway.NewProxy(costUpstream(t), nil)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// export sends one export request of true cost cost and checks that the
// cost header never reaches the client, neither as a header nor as a
// trailer, and that other trailers do.
func export(t *testing.T, base, key string, cost int64, trailer bool) int {
	t.Helper()
	q := "?cost=" + strconv.FormatInt(cost, 10)
	if trailer {
		q += "&trailer=1"
	}
	req, _ := http.NewRequest("GET", base+"/v1/export"+q, nil)
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Cost") != "" || resp.Trailer.Get("X-Cost") != "" {
		t.Errorf("the client saw the cost: header %q trailer %q", resp.Header.Get("X-Cost"), resp.Trailer.Get("X-Cost"))
	}
	if trailer && resp.StatusCode == 200 && resp.Trailer.Get("X-Other") != "kept" {
		t.Errorf("trailer X-Other: got %q, want kept (only the cost is stripped)", resp.Trailer.Get("X-Other"))
	}
	return resp.StatusCode
}

// left reads key's tokens in store without taking.
func left(t *testing.T, store limit.Store, key string) int64 {
	t.Helper()
	l := limit.Limit{Name: "s", Count: 1, Period: time.Second, Burst: 100}
	d, err := store.Take(context.Background(), &limit.Request{Key: "k:" + key, Cost: 101, Limits: []limit.Limit{l}})
	if err != nil || d.Allowed {
		t.Fatalf("peek: %+v, %v", d, err)
	}
	return d.Remaining
}

// TestSettleOverRedis settles through a real upstream and a real Redis,
// without leases: each response's true cost is taken exactly, the unused
// part given back exactly and never above the burst, headers and trailers
// alike, and a cost beyond what is left leaves the key in debt.
func TestSettleOverRedis(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	store := newRedisStore(t, []string{redistest.Standalone(t).Addr()}, clock)
	base := settleGateway(t, store, clock)
	steps := []struct {
		cost     int64
		trailer  bool
		wantLeft int64
	}{
		{5, false, 95}, // the rest taken: 2 then 3 more
		{0, false, 95}, // all given back
		{1, true, 94},  // a streamed response's trailer: 1 given back
		{10, true, 84}, // 8 more taken from a trailer
		{2, false, 82}, // the estimate was right
		{90, false, 0}, // 8 short: debt
	}
	for i, st := range steps {
		if code := export(t, base, "key_a", st.cost, st.trailer); code != 200 {
			t.Fatalf("step %d: got %d, want 200", i, code)
		}
		if got := left(t, store, "key_a"); got != st.wantLeft {
			t.Errorf("step %d (cost %d): got %d left, want %d", i, st.cost, got, st.wantLeft)
		}
	}
	// In debt by 8 tokens: 8 s to pay it, and 2 more for the estimate.
	clock.Advance(9 * time.Second)
	if code := export(t, base, "key_a", 2, false); code != 429 {
		t.Errorf("9 s after a debt of 8: got %d, want 429", code)
	}
	clock.Advance(time.Second)
	if code := export(t, base, "key_a", 2, false); code != 200 {
		t.Errorf("10 s after a debt of 8: got %d, want 200", code)
	}
	// Giving back never passes the burst: a fresh key's cost of 0.
	for range 3 {
		export(t, base, "key_b", 0, false)
	}
	if got := left(t, store, "key_b"); got != 100 {
		t.Errorf("fresh key after three free responses: got %d left, want 100, the burst", got)
	}
}

// TestSettleThroughLeases runs the production stack (leases over the
// guard over Redis): once the key is busy, its estimates are spent from
// leased tokens and its settles are made against them, with no Redis call,
// and the cost header never reaches the client.
func TestSettleThroughLeases(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	srv := redistest.Standalone(t)
	p, err := pipeline.New(t.Context(), pipeline.Config{
		Redis: redisstore.Config{Addrs: []string{srv.Addr()}, Now: clock.Now},
		Lease: lease.Config{Now: clock.Now, Lookahead: 20 * time.Second}, Fleet: limit.Fleet{Gateways: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	base := settleGateway(t, p, clock)
	// Busy: a batch of 20 leased.
	for range 3 {
		if code := export(t, base, "key_l", 2, false); code != 200 {
			t.Fatalf("warm-up: got %d", code)
		}
	}
	// Takes run as functions (FCALL), refilling the lease in the
	// background; a settle or give-back in Redis is a script of its own
	// (EVALSHA).
	before := commandCalls(t, srv, "evalsha")
	for _, cost := range []int64{3, 1, 0, 4} {
		if code := export(t, base, "key_l", cost, true); code != 200 {
			t.Fatalf("cost %d: got %d", cost, code)
		}
	}
	if got := commandCalls(t, srv, "evalsha") - before; got != 0 {
		t.Errorf("Redis ran %d settle scripts for four settles within a lease, want 0", got)
	}
	// A settle beyond the lease spills into Redis: the rest is taken there.
	redisBefore := left(t, p.Redis(), "key_l")
	if code := export(t, base, "key_l", 60, false); code != 200 {
		t.Fatalf("cost 60: got %d", code)
	}
	if got := left(t, p.Redis(), "key_l"); got >= redisBefore {
		t.Errorf("a settle beyond the lease: Redis holds %d, had %d; want fewer", got, redisBefore)
	}
}

// commandCalls is how many times a server has run command, from INFO
// commandstats.
func commandCalls(t *testing.T, srv *redistest.Server, command string) int64 {
	t.Helper()
	v, err := srv.Do(t.Context(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := v.(string)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
