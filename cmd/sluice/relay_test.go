package main

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	// Each gateway picks its first relay by a hash of its name, so both may
	// pick the same one: the relays' requests are counted where they went.
	counted := false
	for _, r := range relays {
		resp, body := proctest.Do(t, "GET", r+"/metrics")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("relay %s /metrics: status %d", r, resp.StatusCode)
		}
		counted = counted || strings.Contains(body, "sluice_relay_requests_total")
	}
	if !counted {
		t.Error("no relay's /metrics has sluice_relay_requests_total")
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

// TestRelayProcessKilled runs a real `sluice relay` and a gateway that
// leases through it, kills the relay with SIGKILL while requests flow, and
// starts it again on the same address: every request is answered (none
// fails), the gateway takes from Redis directly while the relay is down
// and through the relay once it is back, and no key is ever admitted past
// its burst, before, across or after the kill.
func TestRelayProcessKilled(t *testing.T) {
	addr := redistest.Standalone(t).Addr()
	env := []string{"SLUICE_RELAY_TOKEN=" + relayTestToken}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	relayAddr := ln.Addr().String()
	ln.Close()
	startRelay := func() *proctest.Process {
		return sluice.StartEnv(t, env, "relay", "--redis", addr, "--relays", "1", "--listen", relayAddr, "--redis-timeout", "1s", "--log-level", "warn")
	}
	relay := startRelay()
	gw := sluice.StartEnv(t, env, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--rules", writeFile(t, "rules.yaml", sharedRules), "--redis", addr, "--redis-timeout", "1s",
		"--relay", "http://"+relayAddr, "--relay-timeout", "2s", "--log-level", "warn")
	via := func(how string) float64 {
		_, body := get(t, "GET", gw.MetricsURL+"/metrics")
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, "sluice_relay_client_takes_total{") && strings.Contains(line, `via="`+how+`"`) {
				v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				return v
			}
		}
		return 0
	}
	// send sends n requests for key from 4 clients and counts the answers.
	send := func(key string, n int, during func()) (allowed, refused, other int64) {
		var a, r, o atomic.Int64
		var sent atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for sent.Add(1) <= int64(n) {
					req, _ := http.NewRequest("GET", gw.URL+"/", nil)
					req.Header.Set("X-API-Key", key)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						o.Add(1)
						continue
					}
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						a.Add(1)
					case http.StatusTooManyRequests:
						r.Add(1)
					default:
						o.Add(1)
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		if during != nil {
			during()
		}
		wg.Wait()
		return a.Load(), r.Load(), o.Load()
	}
	const burst, n = 12, 40
	if a, r, o := send("before", n, nil); a != burst || r != n-burst || o != 0 {
		t.Errorf("relay up: got %d allowed, %d refused, %d other; want %d, %d, 0", a, r, o, burst, n-burst)
	}
	if via("relay") == 0 {
		t.Error("the gateway took nothing through its relay while it was up")
	}
	direct := via("direct")
	// Kill the relay with the requests for "across" in flight: tokens it
	// had leased are lost (under), never spent twice (over).
	a, r, o := send("across", n, func() { time.Sleep(30 * time.Millisecond); relay.Kill() })
	if a > burst || a+r != n || o != 0 {
		t.Errorf("relay killed mid-traffic: got %d allowed, %d refused, %d other; want at most %d allowed and every request answered", a, r, o, burst)
	}
	if a, r, o := send("down", n, nil); a != burst || r != n-burst || o != 0 {
		t.Errorf("relay down: got %d allowed, %d refused, %d other; want %d, %d, 0 from Redis directly", a, r, o, burst, n-burst)
	}
	if via("direct") == direct {
		t.Error("the gateway made no take from Redis directly while its relay was down")
	}
	startRelay()
	relayed := via("relay")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a, r, o := send("back-"+strconv.Itoa(int(time.Until(deadline).Milliseconds())), burst, nil); a != burst || r != 0 || o != 0 {
			t.Fatalf("relay back: got %d allowed, %d refused, %d other for a fresh key's burst; want all %d allowed", a, r, o, burst)
		}
		if via("relay") > relayed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not take through its relay again within 10s of its restart")
		}
	}
}
