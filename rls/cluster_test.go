package rls_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestDomainSpreadsOverPrimaries: every descriptor of one domain is a key
// of its own, so one domain's counters spread over every primary of a
// 3-primary cluster, where a hash tag per domain kept them all on one.
func TestDomainSpreadsOverPrimaries(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("spread%d:", time.Now().UnixNano())
	store := pipelineStore(t, cluster.Addrs(), pipeline.Config{
		Redis: redisstore.Config{Prefix: prefix},
		Guard: guard.Config{Timeout: 2 * time.Second, DownAfter: 2 * time.Second, MaxQueue: 5 * time.Second},
	})
	s := serve(t, `
domain: spread
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`, store)
	const users = 300
	for i := range users {
		if got := answer(s.ask(t, "spread", 0, desc("user", fmt.Sprint("u", i)))); got != "OK: OK" {
			t.Fatalf("user %d: got %s, want OK: OK", i, got)
		}
	}
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range primaries {
		n := countKeys(t, p.Do, prefix)
		t.Logf("primary %s holds %d of the domain's %d keys", p.Addr(), n, users)
		if n == 0 {
			t.Errorf("primary %s holds none of the domain's keys, want its share of %d", p.Addr(), users)
		}
		total += n
	}
	if total != users {
		t.Errorf("keys in all: got %d, want one per user, %d", total, users)
	}
}

// countKeys counts the keys under prefix on one node with SCAN.
func countKeys(t *testing.T, do func(context.Context, ...string) (any, error), prefix string) int {
	t.Helper()
	n, cursor := 0, "0"
	for {
		v, err := do(context.Background(), "SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			t.Fatal(err)
		}
		r, ok := v.([]any)
		if !ok || len(r) != 2 {
			t.Fatalf("SCAN: got %v, want [cursor keys]", v)
		}
		keys, _ := r[1].([]any)
		n += len(keys)
		if cursor, _ = r[0].(string); cursor == "0" {
			return n
		}
	}
}

// TestDescriptorStatusesExact: each descriptor's status and remaining are
// its own limit's, on the cluster (descriptors on different primaries,
// taken in one parallel round, grants given back when one refuses) and in
// memory (a key per descriptor, or one per domain): both over, one over, shadow, unlimited, replaces.
func TestDescriptorStatusesExact(t *testing.T) {
	const config = `
domain: exact
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: try
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: old
    rate_limit: {name: old, unit: minute, requests_per_unit: 1}
  - key: new
    rate_limit: {replaces: [{name: old}], unit: minute, requests_per_unit: 5}
`
	// each is one request, repeated: the last answer's codes and remaining.
	type want struct {
		keys      []string
		times     int
		codes     string
		remaining []uint32
	}
	cases := []struct {
		name string
		want
	}{
		{"both over", want{[]string{"a", "b"}, 3, "OVER_LIMIT: OVER_LIMIT OVER_LIMIT", []uint32{0, 0}}},
		// big's grant in the refused third request was given back: 10 less 2.
		{"one over", want{[]string{"a", "big"}, 3, "OVER_LIMIT: OVER_LIMIT OK", []uint32{0, 8}}},
		{"shadow over", want{[]string{"big", "try"}, 2, "OK: OK OK", []uint32{8, 0}}},
		{"unlimited", want{[]string{"free", "a"}, 3, "OVER_LIMIT: OK OVER_LIMIT", []uint32{math.MaxUint32, 0}}},
		{"replaces", want{[]string{"old", "new"}, 2, "OK: OK OK", []uint32{0, 3}}},
	}
	for _, st := range []struct {
		name  string
		store func(t *testing.T) limit.Store
	}{
		{"Cluster", func(t *testing.T) limit.Store { return clusterStore(t) }},
		{"Memory", func(t *testing.T) limit.Store { return memstore.New(memstore.Config{}) }},
		// The decision stack in process has nothing to give back with, so
		// a domain stays one key, taken all or nothing: Results say each
		// descriptor's answer.
		{"OneKeyPerDomain", func(t *testing.T) limit.Store { return pipelineStore(t, nil, pipeline.Config{}) }},
	} {
		t.Run(st.name, func(t *testing.T) {
			s := serve(t, config, st.store(t))
			for _, tt := range cases {
				t.Run(tt.name, func(t *testing.T) {
					value := spreadValue(t, st.name == "Cluster", tt.keys)
					descs := ds()
					for _, k := range tt.keys {
						descs = append(descs, desc(k, value))
					}
					resp := s.ask(t, "exact", 0, descs...)
					for range tt.times - 1 {
						resp = s.ask(t, "exact", 0, descs...)
					}
					if got := answer(resp); got != tt.codes {
						t.Errorf("request %d: got %s, want %s", tt.times, got, tt.codes)
					}
					for i, w := range tt.remaining {
						if got := resp.GetStatuses()[i].GetLimitRemaining(); got != w {
							t.Errorf("descriptor %s: got %d remaining, want %d", tt.keys[i], got, w)
						}
					}
				})
			}
		})
	}
}

// spreadValue returns a descriptor value under which keys' descriptors
// live on different primaries of the cluster (when onCluster), so that a
// request of them is taken on several shards at once.
func spreadValue(t *testing.T, onCluster bool, keys []string) string {
	t.Helper()
	base := strings.ReplaceAll(t.Name(), "/", "-")
	if !onCluster {
		return base
	}
	for i := range 200 {
		v := fmt.Sprint(base, i)
		nodes := map[string]bool{}
		for _, k := range keys {
			n, err := cluster.NodeForKey(context.Background(), "{rls:exact/"+k+"="+v+"}")
			if err != nil {
				t.Fatal(err)
			}
			nodes[n.Addr()] = true
		}
		if len(nodes) == len(keys) {
			return v
		}
	}
	t.Fatalf("no value puts %v on different primaries", keys)
	return ""
}
