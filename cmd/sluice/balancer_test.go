package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestBalancerUsage(t *testing.T) {
	badRegion := writeFile(t, "tokens.yaml", "- {name: mars, secret: mars-token-0123456789, region: mars}\n")
	unknownField := writeFile(t, "tokens.yaml", "- {name: us, secret: us-token-0123456789, regoin: us}\n")
	testUsage(t, []usageTest{
		{[]string{"balancer", "--regions", "us", "--tokens", "/nonexistent/tokens.yaml"}, 1, "--tokens: open /nonexistent/tokens.yaml"},
		{[]string{"balancer", "--regions", "us", "--tokens", badRegion}, 1, `region "mars" is not one of [us]`},
		{[]string{"balancer", "--regions", "us", "--tokens", unknownField}, 1, "field regoin not found"},
		{[]string{"balancer", "--regions", "us", "--trusted-network", "--max-state-bytes", "1000"}, 1, "--max-state-bytes 1000: want at least 1048576"},
		{[]string{"balancer", "--regions", "us,eu,ap", "--trusted-network", "--max-state-bytes", "1048576"}, 1, "want at least 1572864"},
		{[]string{"balancer"}, 1, "--regions is empty"},
		{[]string{"balancer", "--regions", "us,us"}, 2, `region "us" is named twice`},
		{[]string{"balancer", "--regions", "us,eu", "--min-share", "1.5"}, 1, "--min-share 1.5: want a fraction"},
		{[]string{"balancer", "--regions", "us", "--interval", "0s"}, 1, "must be positive"},
		{[]string{"balancer", "-h"}, 0, "usage: sluice balancer"},
		{[]string{"balancer", "--regions", "us", "--interval", "10s", "--down-after", "15s"}, 1, "--down-after 15s: want at least twice --interval 10s"},
		{[]string{"balancer", "--regions", "us"}, 1, "no token: neither --tokens nor $SLUICE_BALANCER_TOKEN is set"},
		{[]string{"balancer", "--regions", "us", "--trusted-network", "--standby-of", "primary:8082"}, 1, "want an http or https URL"},
		{[]string{"gateway", "--balancer-url", "http://127.0.0.1:1", "--regions", "us,eu"}, 1, "--balancer-url needs --region"},
		{[]string{"gateway", "--balancer-url", "http://127.0.0.1:1", "--region", "ap", "--regions", "us,eu"}, 1, `--region "ap" is not among --regions`},
		{[]string{"gateway", "--regions", "us,eu"}, 1, "--regions is set without --balancer-url"},
		{[]string{"gateway", "--balancer-url", "ftp://x", "--region", "us", "--regions", "us"}, 1, "want an http or https URL"},
	})
}

// TestBalancerServes starts the balancer and reads what it serves before
// any gateway reported: no shares yet, and its health.
func TestBalancerServes(t *testing.T) {
	p := sluice.Start(t, "balancer", "--listen", "127.0.0.1:0", "--regions", "us,eu,ap", "--interval", "100ms", "--trusted-network")
	resp, body := get(t, http.MethodGet, p.URL+"/healthz")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: got %d %q, want 200", resp.StatusCode, body)
	}
	resp, body = get(t, http.MethodGet, p.URL+"/v1/shares?region=mars")
	var e struct{ Error string }
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
		t.Errorf("GET shares of an unknown region: got %d %q, want 400 with an error", resp.StatusCode, body)
	}
	resp, body = get(t, http.MethodGet, p.URL+"/metrics")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "sluice_balancer_rebalance_duration_seconds") {
		t.Errorf("GET /metrics: got %d, want the balancer's metrics", resp.StatusCode)
	}
}

// TestBalancerRegionTokens starts the balancer with a token per region and
// an operator's: each region's token polls its own region only, with the
// Bearer scheme in any case, and only the operator's reads a key's shares.
func TestBalancerRegionTokens(t *testing.T) {
	tokens := writeFile(t, "tokens.yaml", `- {name: us-gateways, secret: us-token-0123456789, region: us}
- {name: eu-gateways, secret: eu-token-0123456789, region: eu}
- {name: ops, secret: ops-token-0123456789}
`)
	p := sluice.Start(t, "balancer", "--listen", "127.0.0.1:0", "--regions", "us,eu", "--tokens", tokens, "--poll-timeout", "10ms")
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/v1/shares?region=us&wait=0s", "Bearer us-token-0123456789", http.StatusServiceUnavailable}, // no shares yet
		{"/v1/shares?region=us&wait=0s", "bearer us-token-0123456789", http.StatusServiceUnavailable},
		{"/v1/shares?region=eu&wait=0s", "Bearer us-token-0123456789", http.StatusForbidden},
		{"/v1/shares?region=eu&wait=0s", "", http.StatusUnauthorized},
		{"/v1/keys/k:a", "Bearer eu-token-0123456789", http.StatusForbidden},
		{"/v1/keys/k:a", "Bearer ops-token-0123456789", http.StatusServiceUnavailable}, // no shares yet
		{"/v1/shares?region=us&wait=0s", "Bearer ops-token-0123456789", http.StatusForbidden},
	}
	for _, tt := range tests {
		if resp, body := get(t, http.MethodGet, p.URL+tt.path, "Authorization", tt.auth); resp.StatusCode != tt.want {
			t.Errorf("GET %s with %q: got %d %s, want %d", tt.path, tt.auth, resp.StatusCode, body, tt.want)
		}
	}
}
