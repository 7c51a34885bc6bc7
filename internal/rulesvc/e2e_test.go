package rulesvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesvc"
)

// The end-to-end tests run the real binary: rules service replicas and
// gateways as processes, over the test database.

// sluice is the binary the end-to-end tests run, built on first use.
var sluice proctest.Binary

func TestMain(m *testing.M) { os.Exit(sluice.RunTests(m)) }

// startService runs a rules service replica on addr over schema.
func startService(t *testing.T, schema, addr string, extra ...string) *proctest.Process {
	t.Helper()
	args := append([]string{"rules", "--postgres", postgresDSN(), "--schema", schema, "--listen", addr,
		"--poll-timeout", "2s", "--gateway-ttl", "10s", "--refresh", "500ms"}, extra...)
	return sluice.StartEnv(t, []string{"SLUICE_WRITE_TOKEN=" + writeToken, "SLUICE_READ_TOKEN=" + readToken,
		"SLUICE_GATEWAY_TOKEN=" + gatewayToken}, args...)
}

// startGateway runs a gateway following the service at url, keeping its
// rules in cache.
func startGateway(t *testing.T, id, url, cache string) *proctest.Process {
	t.Helper()
	return sluice.StartEnv(t, []string{"SLUICE_GATEWAY_ID=" + id, "SLUICE_REGION=eu", "SLUICE_GATEWAY_TOKEN=" + gatewayToken},
		"gateway", "--listen", "127.0.0.1:0", "--rules-url", url, "--rules-cache", cache, "--log-level", "warn")
}

// rulesVersion is the version a gateway's /healthz reports.
func rulesVersion(t *testing.T, gw *proctest.Process) int64 {
	t.Helper()
	resp, err := http.Get(gw.URL + "/healthz")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var body struct {
		RulesVersion int64 `json:"rules_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return -1
	}
	return body.RulesVersion
}

// statuses sends n requests as apiKey and returns their statuses.
func statuses(t *testing.T, gw *proctest.Process, apiKey string, n int) []int {
	t.Helper()
	var out []int
	for range n {
		req, _ := http.NewRequest("GET", gw.URL+"/v1/items", nil)
		req.Header.Set("X-API-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		out = append(out, resp.StatusCode)
	}
	return out
}

// freeAddr returns a loopback address nothing listens on, so a service can
// be restarted where its gateways look for it.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// setFreeLimit changes the free plan's rule: when refuse is set, to a
// fresh limit (named by tag) of one request an hour, so the second request
// is refused; else to 1000 a second. It returns the snapshot version that
// carries the change.
func setFreeLimit(t *testing.T, base string, ruleID int64, refuse bool, tag string) int64 {
	t.Helper()
	lim := map[string]any{"name": "s", "rate": 1000, "per": "1s"}
	if refuse {
		lim = map[string]any{"name": "clamp" + tag, "rate": 1, "per": "1h"}
	}
	var res struct {
		Snapshot struct{ Version int64 }
	}
	mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", ruleID), map[string]any{"scope": "plan",
		"match": map[string]any{"plan": "free"}, "limits": []map[string]any{lim}}, 200, &res)
	return res.Snapshot.Version
}

// seedFree declares key_free on the free plan with a generous limit and
// returns the plan rule's ID.
func seedFree(t *testing.T, base string) int64 {
	t.Helper()
	mustCall(t, base, "PUT", "/admin/v1/keys/key_free", map[string]any{"plan": "free"}, 200, nil)
	var created struct {
		After struct{ ID int64 }
	}
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "plan", "match": map[string]any{"plan": "free"},
		"limits": []map[string]any{{"name": "s", "rate": 1000, "per": "1s"}}}, 201, &created)
	return created.After.ID
}

func waitGatewayVersion(t *testing.T, v int64, gws ...*proctest.Process) {
	t.Helper()
	eventually(t, 15*time.Second, fmt.Sprintf("gateways at version %d", v), func() bool {
		for _, gw := range gws {
			if rulesVersion(t, gw) < v {
				return false
			}
		}
		return true
	})
}

func TestE2EChangeReachesEveryGatewayThroughEitherReplica(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := startService(t, schema, "127.0.0.1:0", "--no-canary")
	b := startService(t, schema, "127.0.0.1:0", "--no-canary")
	ruleID := seedFree(t, a.URL)
	dir := t.TempDir()
	// Gateways 0 and 1 follow replica A, 2 and 3 replica B.
	var gws []*proctest.Process
	for i := range 4 {
		url := a.URL
		if i >= 2 {
			url = b.URL
		}
		gws = append(gws, startGateway(t, fmt.Sprintf("gw-%d", i), url, filepath.Join(dir, fmt.Sprintf("gw-%d.json", i))))
	}
	waitGatewayVersion(t, stableVersion(t, a.URL), gws...)

	const rounds = 5
	var worst, total time.Duration
	for round := range rounds {
		// Alternate between a limit that refuses the second request and
		// one that does not; each change goes through replica A.
		refuse := round%2 == 0
		sent := time.Now()
		v := setFreeLimit(t, a.URL, ruleID, refuse, fmt.Sprint(round))
		arrived := make([]time.Duration, len(gws))
		eventually(t, 10*time.Second, fmt.Sprintf("round %d: every gateway at version %d", round, v), func() bool {
			all := true
			for i, gw := range gws {
				if arrived[i] == 0 {
					if rulesVersion(t, gw) >= v {
						arrived[i] = time.Since(sent)
					} else {
						all = false
					}
				}
			}
			return all
		})
		slowest := time.Duration(0)
		for _, d := range arrived {
			slowest = max(slowest, d)
		}
		worst, total = max(worst, slowest), total+slowest
		t.Logf("round %d: version %d on all %d gateways after %v (per gateway %v)", round, v, len(gws), slowest, arrived)
		for i, gw := range gws {
			got := statuses(t, gw, "key_free", 2)
			want := []int{200, 200}
			if refuse {
				want = []int{200, 429}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("round %d, gateway %d: got statuses %v, want %v", round, i, got, want)
			}
		}
	}
	t.Logf("propagation to %d gateway processes over 2 replicas: mean %v, worst %v (bound 10s)", len(gws), total/rounds, worst)
}

func TestE2EGatewaysOutliveTheService(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	addr := freeAddr(t)
	svc := startService(t, schema, addr, "--no-canary")
	ruleID := seedFree(t, svc.URL)
	v := setFreeLimit(t, svc.URL, ruleID, true, "")
	dir := t.TempDir()
	cache0, cache1 := filepath.Join(dir, "gw-0.json"), filepath.Join(dir, "gw-1.json")
	gw0 := startGateway(t, "gw-0", svc.URL, cache0)
	gw1 := startGateway(t, "gw-1", svc.URL, cache1)
	waitGatewayVersion(t, v, gw0, gw1)

	svc.Kill()
	// Both keep enforcing the last rules.
	for i, gw := range []*proctest.Process{gw0, gw1} {
		if got := statuses(t, gw, "key_free", 2); fmt.Sprint(got) != "[200 429]" {
			t.Errorf("gateway %d with the service down: got %v, want [200 429]", i, got)
		}
	}
	// A gateway restarted while the service is down starts from its cache.
	gw1.Kill()
	gw1 = startGateway(t, "gw-1", svc.URL, cache1)
	if got := rulesVersion(t, gw1); got != v {
		t.Errorf("restarted gateway: got rules version %d, want %d from its cache", got, v)
	}
	if got := statuses(t, gw1, "key_free", 2); fmt.Sprint(got) != "[200 429]" {
		t.Errorf("restarted gateway with the service down: got %v, want [200 429]", got)
	}

	// The service comes back where it was; gateways catch up on the next
	// change.
	svc = startService(t, schema, addr, "--no-canary")
	v2 := setFreeLimit(t, svc.URL, ruleID, false, "")
	waitGatewayVersion(t, v2, gw0, gw1)
	for i, gw := range []*proctest.Process{gw0, gw1} {
		if got := statuses(t, gw, "key_free", 2); fmt.Sprint(got) != "[200 200]" {
			t.Errorf("gateway %d after the service returned: got %v, want [200 200]", i, got)
		}
	}
}

func TestE2EExpiredOverrideStopsApplying(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	svc := startService(t, schema, "127.0.0.1:0")
	seedFree(t, svc.URL)
	gw := startGateway(t, "gw-0", svc.URL, filepath.Join(t.TempDir(), "gw.json"))

	expires := time.Now().Add(3 * time.Second)
	var res struct {
		Snapshot struct {
			Version   int64
			Emergency int64 `json:"emergency_version"`
		}
	}
	mustCall(t, svc.URL, "PUT", "/admin/v1/overrides/key_free", map[string]any{
		"limits":     []map[string]any{{"name": "clamp", "rate": 1, "per": "1h"}},
		"expires_at": expires.Format(time.RFC3339Nano), "reason": "INC-9: clamp for a moment"}, 200, &res)
	v := res.Snapshot.Emergency // when the seeded rules are still a canary
	if v == 0 {
		v = res.Snapshot.Version
	}
	waitGatewayVersion(t, v, gw)
	if time.Now().After(expires) {
		t.Fatal("the override expired before the gateway had it; the test machine is too slow for a 3s expiry")
	}
	if got := statuses(t, gw, "key_free", 2); fmt.Sprint(got) != "[200 429]" {
		t.Fatalf("under the override: got %v, want [200 429]", got)
	}
	// Nobody touches it: once expired, requests pass again.
	eventually(t, 10*time.Second, "the override no longer applying", func() bool {
		return fmt.Sprint(statuses(t, gw, "key_free", 1)) == "[200]"
	})
	if time.Now().Before(expires) {
		t.Errorf("requests passed at %v, before the override expired at %v", time.Now(), expires)
	}
	if got := statuses(t, gw, "key_free", 3); fmt.Sprint(got) != "[200 200 200]" {
		t.Errorf("after expiry: got %v, want [200 200 200]", got)
	}
}

// A gateway named and placed by flags, not the environment, is counted in
// its region of the fleet the service reports.
func TestE2EGatewayIdentityFlags(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	svc := startService(t, schema, "127.0.0.1:0")
	seedFree(t, svc.URL)
	sluice.StartEnv(t, []string{"SLUICE_GATEWAY_TOKEN=" + gatewayToken}, "gateway", "--listen", "127.0.0.1:0",
		"--rules-url", svc.URL, "--gateway-id", "gw-flagged", "--region", "ap", "--log-level", "warn")
	eventually(t, 10*time.Second, "gw-flagged counted in region ap", func() bool {
		var res struct {
			Fleet struct {
				Total   int
				Regions map[string]int
			}
			Gateways []struct{ ID, Region string }
		}
		mustCall(t, svc.URL, "GET", "/admin/v1/fleet", nil, 200, &res)
		return res.Fleet.Regions["ap"] == 1 && len(res.Gateways) == 1 && res.Gateways[0].ID == "gw-flagged"
	})
}

// The design's promise under sluice's own defaults: a rule change made
// through the admin API is enforced on every gateway within 10 s, canary
// included, and a change that refuses nearly everything is still halted by
// the canary. The service runs with no flag but where to run: canary
// window, samples and gateways are the defaults.
func TestE2ERuleChangeWithin10sOnDefaultFlags(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	svc := sluice.StartEnv(t, []string{"SLUICE_WRITE_TOKEN=" + writeToken, "SLUICE_READ_TOKEN=" + readToken,
		"SLUICE_GATEWAY_TOKEN=" + gatewayToken},
		"rules", "--postgres", postgresDSN(), "--schema", schema, "--listen", "127.0.0.1:0")
	base := svc.URL
	ruleID := seedFree(t, base)
	// The first rules go to every gateway at once: there is nothing to
	// compare a canary with.
	stable := stableVersion(t, base)
	if ro := rolloutOf(t, base, stable); ro.State != "promoted" || !strings.Contains(ro.Reason, "first rules") {
		t.Fatalf("first rules: got rollout %s %q, want promoted as the first rules", ro.State, ro.Reason)
	}
	dir := t.TempDir()
	var gws []*proctest.Process
	for i := range 3 {
		gws = append(gws, startGateway(t, fmt.Sprintf("gw-%d", i), base, filepath.Join(dir, fmt.Sprintf("gw-%d.json", i))))
	}
	waitGatewayVersion(t, stable, gws...)
	// A gateway counts once it has reported, one report interval (5 s)
	// after it starts.
	eventually(t, 20*time.Second, "a fleet of 3", func() bool {
		var res struct{ Fleet rulesapi.Fleet }
		mustCall(t, base, "GET", "/admin/v1/fleet", nil, 200, &res)
		return res.Fleet.Total == 3
	})

	// Traffic on every gateway, a request every few milliseconds each,
	// so that the canary has samples and the rest a baseline.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, gw := range gws {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/v1/items", nil)
				req.Header.Set("X-API-Key", "key_free")
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(4 * time.Millisecond)
			}
		})
	}
	time.Sleep(6 * time.Second) // every gateway reports its traffic once

	// A harmless change: on every gateway within 10 s.
	sent := time.Now()
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", ruleID), map[string]any{"scope": "plan",
		"match": map[string]any{"plan": "free"}, "limits": []map[string]any{{"name": "s", "rate": 2000, "per": "1s"}}}, 200, &res)
	good := res.Snapshot.Version
	if res.Snapshot.Rollout != "canary" {
		t.Fatalf("got rollout %q, want canary", res.Snapshot.Rollout)
	}
	canaryAt := time.Duration(0)
	eventually(t, 30*time.Second, fmt.Sprintf("every gateway at version %d", good), func() bool {
		n := 0
		for _, gw := range gws {
			if rulesVersion(t, gw) >= good {
				n++
			}
		}
		if n > 0 && canaryAt == 0 {
			canaryAt = time.Since(sent)
		}
		return n == len(gws)
	})
	took := time.Since(sent)
	ro := rolloutOf(t, base, good)
	t.Logf("harmless change: version %d on its canary after %v, on all %d gateways after %v; %s (compared %v)",
		good, canaryAt, len(gws), took, ro.Reason, *ro.Compared)
	if took > 10*time.Second {
		t.Errorf("the change reached every gateway after %v, beyond the 10 s the design promises", took)
	}
	if ro.State != "promoted" || !*ro.Compared {
		t.Errorf("got rollout %s compared %v, want promoted after a comparison: %s", ro.State, *ro.Compared, ro.Reason)
	}

	// A change that refuses nearly everything: halted, and the canary
	// back on the version before it.
	sent = time.Now()
	mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", ruleID), map[string]any{"scope": "plan",
		"match": map[string]any{"plan": "free"}, "limits": []map[string]any{{"name": "s", "rate": 1, "per": "1m"}}}, 200, &res)
	bad := res.Snapshot.Version
	eventually(t, 60*time.Second, "the bad change decided", func() bool { return rolloutOf(t, base, bad).State != "canary" })
	decided := time.Since(sent)
	ro = rolloutOf(t, base, bad)
	t.Logf("refusing change: version %d %s after %v: %s", bad, ro.State, decided, ro.Reason)
	if ro.State != "halted" {
		t.Fatalf("got rollout %s, want halted: %s", ro.State, ro.Reason)
	}
	eventually(t, 10*time.Second, "every gateway back on the harmless version", func() bool {
		for _, gw := range gws {
			if rulesVersion(t, gw) != good {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	for i, gw := range gws {
		if got := statuses(t, gw, "key_free", 2); fmt.Sprint(got) != "[200 200]" {
			t.Errorf("gateway %d after the halt: got %v, want [200 200]", i, got)
		}
	}
}
