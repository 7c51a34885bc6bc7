package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// sharedRules give every key a burst of 12 that refills once an hour, so
// that nothing refills while a test runs.
const sharedRules = `
rules:
  - scope: default
    limits: [{name: h, rate: 1, per: 1h, burst: 12}]
`

func TestRedisSharedBurst(t *testing.T) {
	tests := []struct {
		name  string
		addrs func(t *testing.T) []string
	}{
		{"standalone", func(t *testing.T) []string { return []string{redistest.Standalone(t).Addr()} }},
		{"cluster of 3 primaries", func(t *testing.T) []string { return redistest.StartCluster(t, 3, 0).Addrs() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs := tt.addrs(t)
			rules := writeFile(t, "rules.yaml", sharedRules)
			var gws []*proctest.Process
			// The shared count is exact only while every answer comes from
			// Redis: a deadline long enough for this loaded test machine keeps
			// the local fallback out of the count.
			for range 2 {
				gws = append(gws, sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--rules", rules,
					"--redis", strings.Join(addrs, ","), "--redis-timeout", "1s"))
			}
			// Several keys, so a cluster spreads them over its shards; each
			// key's 30 requests race from 6 clients across both gateways.
			const burst, perKey, clients = 12, 30, 6
			keys := []string{"alpha", "bravo", "charlie", "delta", "echo"}
			type tally struct{ allowed, refused, other int }
			var mu sync.Mutex
			got := map[string]*tally{}
			for _, k := range keys {
				got[k] = &tally{}
			}
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					for i := range perKey / clients {
						for _, k := range keys {
							gw := gws[(c+i)%len(gws)]
							req, _ := http.NewRequest("GET", gw.URL+"/", nil)
							req.Header.Set("X-API-Key", k)
							resp, err := http.DefaultClient.Do(req)
							mu.Lock()
							switch {
							case err != nil:
								got[k].other++
							case resp.StatusCode == 200:
								got[k].allowed++
							case resp.StatusCode == 429:
								got[k].refused++
							default:
								got[k].other++
							}
							mu.Unlock()
							if err == nil {
								resp.Body.Close()
							}
						}
					}
				})
			}
			wg.Wait()
			for _, k := range keys {
				if g := got[k]; *g != (tally{burst, perKey - burst, 0}) {
					t.Errorf("key %s over two gateways: %d allowed, %d refused, %d other; want exactly %d, %d, 0",
						k, g.allowed, g.refused, g.other, burst, perKey-burst)
				}
			}
			// Both gateways agree on what is left.
			for i, gw := range gws {
				resp, _ := get(t, "GET", gw.URL+"/", "X-API-Key", "alpha")
				if resp.StatusCode != 429 || resp.Header.Get("X-RateLimit-Remaining") != "0" {
					t.Errorf("gateway %d after the burst: status %d remaining %q, want 429 and 0",
						i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
				}
			}
			fresh, _ := get(t, "GET", gws[1].URL+"/", "X-API-Key", "foxtrot")
			if want := fmt.Sprint(burst - 1); fresh.Header.Get("X-RateLimit-Remaining") != want {
				t.Errorf("a fresh key: remaining %q, want %s", fresh.Header.Get("X-RateLimit-Remaining"), want)
			}
		})
	}
}
