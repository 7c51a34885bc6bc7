package pipeline_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
)

// commandCalls returns how many times the servers ran each of cmds
// (INFO commandstats), summed.
func commandCalls(t testing.TB, nodes []*redistest.Server, cmds ...string) int64 {
	t.Helper()
	var n int64
	for _, s := range nodes {
		v, err := s.Do(t.Context(), "INFO", "commandstats")
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", s.Addr(), err)
		}
		for _, c := range cmds {
			m := regexp.MustCompile(`cmdstat_` + c + `:calls=(\d+)`).FindStringSubmatch(fmt.Sprint(v))
			if m != nil {
				k, _ := strconv.ParseInt(m[1], 10, 64)
				n += k
			}
		}
	}
	return n
}

// TestQuotaBatched counts a daily quota of one busy key through three
// gateways on real Redis, standalone and a 3-primary cluster, in rounds:
// each gateway admits k requests, then flushes its counts. It measures the
// Redis calls per request beside the same requests checked one by one
// against a per: 1d fixed window (the unbatched way), and checks the fleet
// passes the quota by no more than the package's bound: N-1 + the fleet's
// admissions in one interval (3k).
func TestQuotaBatched(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes func(t *testing.T) []*redistest.Server
	}{
		{"standalone", func(t *testing.T) []*redistest.Server { return []*redistest.Server{redistest.Standalone(t)} }},
		{"cluster", func(t *testing.T) []*redistest.Server { return redistest.StartCluster(t, 3, 0).Nodes() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := tc.nodes(t)
			var addrs []string
			for _, s := range nodes {
				addrs = append(addrs, s.Addr())
			}
			const n, k, count = 3, 25, 1000
			var gws []*pipeline.Pipeline
			for range n {
				// An hour's interval: the test flushes by hand, in turn.
				gws = append(gws, newPipeline(t, pipeline.Config{Redis: redisstore.Config{Addrs: addrs},
					Fleet: limit.Fleet{Gateways: n}, Guard: guard.Config{Timeout: calm},
					Quota: quota.Config{Interval: time.Hour}}))
			}
			qs := []quota.Quota{{Name: "daily", Count: count, Period: quota.Day}}
			window := []limit.Limit{{Name: "daily", Count: count, Period: 24 * time.Hour, Algorithm: limit.FixedWindow}}

			before := commandCalls(t, nodes, "incrby", "get")
			var admitted, sent int64
			for admitted < count+100 && sent < 10*count {
				for g, gw := range gws {
					for range k {
						d, err := gw.Quotas().Take(t.Context(), "k:busy", qs, 1)
						if err != nil {
							t.Fatalf("gateway %d: %v", g, err)
						}
						sent++
						if d.Allowed {
							admitted++
						}
					}
					if err := gw.Quotas().Flush(t.Context()); err != nil {
						t.Fatalf("gateway %d flush: %v", g, err)
					}
				}
				if sent >= 3*count {
					break
				}
			}
			batched := commandCalls(t, nodes, "incrby", "get") - before

			before = commandCalls(t, nodes, "fcall", "evalsha")
			var perRequestAdmitted int64
			for i := range sent {
				d, err := gws[i%n].Take(t.Context(), &limit.Request{Key: "k:busy-window", Limits: window})
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					perRequestAdmitted++
				}
			}
			perRequest := commandCalls(t, nodes, "fcall", "evalsha") - before

			total, err := gws[0].Redis().ReadCounts(t.Context(), "k:busy", []string{counterName(qs[0])})
			if err != nil {
				t.Fatal(err)
			}
			bound := int64(count + n - 1 + n*k)
			t.Logf("%d requests: batched quota %d Redis calls (%.3f a request), per-request window %d (%.3f a request): %.0fx fewer; "+
				"quota admitted %d of %d (over by %d, bound %d), counter %d; window admitted %d",
				sent, batched, float64(batched)/float64(sent), perRequest, float64(perRequest)/float64(sent),
				float64(perRequest)/float64(max(batched, 1)), admitted, count, admitted-count, bound-count, total[0], perRequestAdmitted)
			if admitted < count || admitted > bound {
				t.Errorf("quota admitted %d, want from %d to %d", admitted, count, bound)
			}
			if total[0] != admitted {
				t.Errorf("shared counter %d, want the %d admitted", total[0], admitted)
			}
			if batched*10 > perRequest {
				t.Errorf("batched quota made %d Redis calls for %d requests, per-request check %d: want at least 10 times fewer",
					batched, sent, perRequest)
			}
		})
	}
}

func counterName(q quota.Quota) string {
	id, _, _ := q.Window(time.Now())
	return q.CounterName(id)
}
