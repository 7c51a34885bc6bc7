package failover

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/redisstore"
)

// logTimes returns when the gateway logged msg (its JSON logs' "time").
func logTimes(p *proctest.Process, msg string) []time.Time {
	var out []time.Time
	for line := range strings.Lines(p.Stderr()) {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			out = append(out, rec.Time)
		}
	}
	return out
}

// metric returns the sum of a metric's samples whose labels contain every
// one of match ("name=\"value\"") in the gateway's /metrics.
func metric(t *testing.T, p *proctest.Process, name string, match ...string) float64 {
	t.Helper()
	resp, err := http.Get(p.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		var v float64
		if f := strings.Fields(line); ok && len(f) == 2 {
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// hit is one HTTP request's outcome.
type hit struct {
	at      time.Time
	gateway int
	client  string
	status  int
	err     error
}

// TestKillPrimaryThroughGateways is TestKillPrimary through three real
// gateway processes, as deployed: HTTP in, --redis to the cluster, the
// flags' defaults but for a longer deadline (the test machine is loaded)
// and a shorter breaker pause. It kills the primary serving three clients
// and checks what clients see: 200 or 429 throughout, 503 only for the
// fail-closed login while the shard is down, the runaway within about
// twice its limit, and login answering again once the replica serves.
func TestKillPrimaryThroughGateways(t *testing.T) {
	ctx := t.Context()
	victim, err := cluster.NodeForSlot(ctx, int(redisstore.Slot("k:steady-0")))
	if err != nil {
		t.Fatal(err)
	}
	key := func(prefix string, on bool) string {
		return strings.TrimPrefix(keyOn(t, "k:"+prefix, victim.Addr(), on), "k:")
	}
	steady, runaway, login, other := key("steady", true), key("runaway", true), key("login", true), key("other", false)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	rulesYAML := fmt.Sprintf(`
endpoints:
  - {name: login, method: POST, path: /login}
rules:
  - scope: default
    limits: [{name: s, rate: 1000, per: 1s}]
  - scope: key
    match: {key: %s}
    limits: [{name: s, rate: %d, per: 1s, burst: %d}]
  - scope: endpoint
    match: {endpoint: login}
    limits: [{name: login, rate: 100000, per: 1m}]
    fail_mode: closed
`, runaway, runawayRate, runawayBurst)
	if err := os.WriteFile(rulesFile, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	var gws []*proctest.Process
	for range 3 {
		gws = append(gws, sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--rules", rulesFile, "--redis", strings.Join(cluster.Addrs(), ","), "--gateways", "3",
			"--redis-timeout", "100ms", "--breaker-pause", "1s"))
	}
	defer restore(t, victim)

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	type flow struct {
		name, method, path, key string
		every                   time.Duration
	}
	flows := []flow{
		{"runaway", "GET", "/", runaway, 2 * time.Millisecond},
		{"steady", "GET", "/", steady, 20 * time.Millisecond},
		{"login", "POST", "/login", login, 20 * time.Millisecond},
		{"other", "GET", "/", other, 20 * time.Millisecond},
	}
	var (
		mu   sync.Mutex
		hits []hit
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	for i, gw := range gws {
		for _, f := range flows {
			wg.Go(func() {
				tick := time.NewTicker(f.every)
				defer tick.Stop()
				var mine []hit
				defer func() {
					mu.Lock()
					hits = append(hits, mine...)
					mu.Unlock()
				}()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					req, _ := http.NewRequest(f.method, gw.URL+f.path, nil)
					req.Header.Set("X-API-Key", f.key)
					h := hit{at: time.Now(), gateway: i, client: f.name}
					resp, err := client.Do(req)
					if err != nil {
						h.err = err
					} else {
						h.status = resp.StatusCode
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					mine = append(mine, h)
				}
			})
		}
	}
	finish := func() []hit {
		close(stop)
		wg.Wait()
		return hits
	}

	time.Sleep(1500 * time.Millisecond) // steady state
	killed := time.Now()
	if err := cluster.Kill(ctx, victim); err != nil {
		finish()
		t.Fatal(err)
	}
	heir, err := cluster.WaitFailover(ctx, victim)
	promoted := time.Now()
	if err != nil {
		finish()
		t.Fatal(err)
	}
	// Recovered: every gateway lets a login through after the promotion.
	var recovered time.Time
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, gw := range gws {
			req, _ := http.NewRequest("POST", gw.URL+"/login", nil)
			req.Header.Set("X-API-Key", login)
			resp, err := client.Do(req)
			if err != nil {
				ok = false
				break
			}
			resp.Body.Close()
			ok = ok && resp.StatusCode == http.StatusOK
		}
		if ok {
			recovered = time.Now()
			break
		}
	}
	time.Sleep(time.Second)
	all := finish()
	if recovered.IsZero() {
		t.Fatalf("20 s after %s took over, some gateway still refuses logins", heir.Addr())
	}

	var firstOpen time.Time
	for _, gw := range gws {
		for _, at := range logTimes(gw, "rate limit shard unavailable; limiting its keys locally") {
			if !at.Before(killed) && (firstOpen.IsZero() || at.Before(firstOpen)) {
				firstOpen = at
			}
		}
	}
	t.Logf("timeline: primary %s killed at 0; first gateway logs its breaker open +%v; replica %s promoted +%v; every gateway lets logins through again +%v",
		victim.Addr(), ms(firstOpen.Sub(killed)), heir.Addr(), ms(promoted.Sub(killed)), ms(recovered.Sub(killed)))

	type count struct{ ok, refused, unavailable, other int }
	counts := map[string]*count{}
	runawayOutage := 0
	for _, h := range all {
		c := counts[h.client]
		if c == nil {
			c = &count{}
			counts[h.client] = c
		}
		switch {
		case h.err != nil:
			c.other++
			t.Errorf("%s via gateway %d at +%v: %v", h.client, h.gateway, ms(h.at.Sub(killed)), h.err)
		case h.status == http.StatusOK:
			c.ok++
			if h.client == "runaway" && !h.at.Before(killed) && h.at.Before(recovered) {
				runawayOutage++
			}
		case h.status == http.StatusTooManyRequests:
			c.refused++
		case h.status == http.StatusServiceUnavailable && h.client == "login":
			c.unavailable++
		default:
			c.other++
			t.Errorf("%s via gateway %d at +%v: status %d, want 200 or 429 (or 503 for login)", h.client, h.gateway, ms(h.at.Sub(killed)), h.status)
		}
	}
	for _, f := range flows {
		c := counts[f.name]
		t.Logf("%-8s %5d ok, %5d refused (429), %4d unavailable (503)", f.name, c.ok, c.refused, c.unavailable)
	}
	if counts["login"].unavailable == 0 {
		t.Error("login: no 503 while its shard was down, want fail-closed refusals")
	}
	for _, name := range []string{"steady", "other"} {
		if c := counts[name]; c.refused > 0 {
			t.Errorf("%s, well within its limit: %d requests refused", name, c.refused)
		}
	}
	// From the kill to recovery the runaway client met Redis's bucket
	// (before the breakers opened and after the promotion, which may have
	// lost its latest takes) and each gateway's local share: about twice
	// its limit, with a burst from each.
	window := recovered.Sub(killed)
	bound := 3*runawayBurst + int(2*runawayRate*window.Seconds()) + runawayRate
	t.Logf("runaway client: %d admitted in the %v from kill to recovery (%.1fx its limit of %d/s); bound %d",
		runawayOutage, ms(window), float64(runawayOutage)/(runawayBurst+runawayRate*window.Seconds()), runawayRate, bound)
	if runawayOutage > bound {
		t.Errorf("runaway client: got %d admitted from kill to recovery, want at most %d", runawayOutage, bound)
	}
	for i, gw := range gws {
		local := metric(t, gw, "sluice_guard_fallback_decisions_total", `source="local-fallback"`)
		closed := metric(t, gw, "sluice_guard_fallback_decisions_total", `source="fail-closed"`)
		opened := metric(t, gw, "sluice_guard_breaker_opened_total", `shard="`+victim.Addr()+`"`)
		t.Logf("gateway %d metrics: %v local-fallback and %v fail-closed decisions; breaker of %s opened %v times", i, local, closed, victim.Addr(), opened)
		if local == 0 || closed == 0 || opened == 0 {
			t.Errorf("gateway %d metrics: got %v local-fallback, %v fail-closed decisions, %v breaker openings; want some of each", i, local, closed, opened)
		}
	}
}
