package main

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

const relayTestToken = "relay-e2e-token-0123456789"

// TestRelayProcesses runs sluice relay twice and two gateways behind them
// as processes over one Redis: a key's hourly burst is admitted exactly
// once across the group, and the relay serves its metrics.
func TestRelayProcesses(t *testing.T) {
	addr := redistest.Standalone(t).Addr()
	env := []string{"SLUICE_RELAY_TOKEN=" + relayTestToken}
	var relays []string
	for range 2 {
		r := sluice.StartEnv(t, env, "relay", "--redis", addr, "--relays", "2", "--listen", "127.0.0.1:0", "--redis-timeout", "1s", "--log-level", "warn")
		relays = append(relays, r.URL)
	}
	rules := writeFile(t, "rules.yaml", sharedRules)
	var gws []*proctest.Process
	for i := range 2 {
		urls := []string{relays[i], relays[1-i]}
		gws = append(gws, sluice.StartEnv(t, env, "gateway", "--listen", "127.0.0.1:0", "--rules", rules, "--gateways", "2",
			"--redis", addr, "--redis-timeout", "1s", "--relay", strings.Join(urls, ","), "--relay-timeout", "2s", "--log-level", "warn"))
	}
	const burst, requests = 12, 60
	var allowed, refused, other atomic.Int64
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Go(func() {
			for i := range requests / 6 {
				req, _ := http.NewRequest("GET", gws[(c+i)%2].URL+"/", nil)
				req.Header.Set("X-API-Key", "relayed")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					allowed.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != burst || refused.Load() != requests-burst || other.Load() != 0 {
		t.Errorf("got %d allowed, %d refused, %d other; want exactly the burst of %d allowed across both gateways and relays, the other %d refused",
			allowed.Load(), refused.Load(), other.Load(), burst, requests-burst)
	}
	resp, body := proctest.Do(t, "GET", relays[0]+"/metrics")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "sluice_relay_requests_total") {
		t.Errorf("relay /metrics: status %d, no sluice_relay_requests_total", resp.StatusCode)
	}
	if resp, _ := proctest.Do(t, "POST", relays[0]+"/v1/lease"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("relay without a token: status %d, want 401", resp.StatusCode)
	}
}

func TestRelayFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no redis", []string{"relay", "--relays", "2"}, "--redis is empty"},
		{"no relays", []string{"relay", "--redis", "127.0.0.1:1"}, "--relays 0"},
		{"no token", []string{"relay", "--redis", "127.0.0.1:1", "--relays", "2"}, "no token"},
		{"gateway relay without redis", []string{"gateway", "--relay", "http://127.0.0.1:1"}, "--relay needs --redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := sluice.Run(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure naming %q", code, stderr, tc.want)
			}
		})
	}
}
