package pipeline_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// orgDoc gives org acme four keys of 30 an hour each, and the org 70 an
// hour in all: the keys together could take 120.
const orgDoc = `
keys:
  a1: {plan: pro, org: acme}
  a2: {plan: pro, org: acme}
  a3: {plan: pro, org: acme}
  a4: {plan: pro, org: acme}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: h, rate: 30, per: 1h}]
  - scope: org
    match: {org: acme}
    limits: [{name: h, rate: 70, per: 1h}]
`

// TestOrgAcrossGateways sends an org's keys through three gateways
// (pipelines of their own, leases on) on real Redis, standalone and a
// 3-primary cluster: no key passes its own limit and the keys together do
// not pass the org's, which is reached.
func TestOrgAcrossGateways(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(orgDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) []string
	}{
		{"standalone", func(t *testing.T) []string { return []string{redistest.Standalone(t).Addr()} }},
		{"cluster", func(t *testing.T) []string { return redistest.StartCluster(t, 3, 0).Addrs() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := tc.addrs(t)
			var gws []*pipeline.Pipeline
			for range 3 {
				gws = append(gws, newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: addrs},
					Fleet: limit.Fleet{Gateways: 3}, Guard: guard.Config{Timeout: calm}}))
			}
			keys := []string{"a1", "a2", "a3", "a4"}
			var mu sync.Mutex
			allowed := map[string]int{}
			var wg sync.WaitGroup
			for g, gw := range gws {
				for _, key := range keys {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res := set.Resolve(time.Now(), rules.Query{APIKey: key})
						for range 40 {
							req := limit.Request{Key: res.StoreKey("k:" + key), Cost: res.Cost,
								Limits: res.AppendStoreLimits(nil, key)}
							d, err := gw.Take(t.Context(), &req)
							if err != nil {
								t.Errorf("gateway %d key %s: %v", g, key, err)
								return
							}
							if d.Allowed {
								mu.Lock()
								allowed[key]++
								mu.Unlock()
							}
						}
					}()
				}
			}
			wg.Wait()
			total := 0
			for _, key := range keys {
				if allowed[key] > 30 {
					t.Errorf("key %s: %d allowed, over its own limit of 30", key, allowed[key])
				}
				total += allowed[key]
			}
			if total != 70 {
				t.Errorf("org acme: %d allowed in all (%v), want exactly its limit of 70", total, allowed)
			}
		})
	}
}
