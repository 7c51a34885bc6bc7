package pipeline_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// BenchmarkStack compares decisions through the production stack (leases,
// guard, Redis store), as the gateway runs it, with the bare Redis store
// underneath it, from the same client in the same run: 10,000
// gateway-shaped keys with two limits each, from parallel goroutines. The
// ratio of the two is what the layers cost. "hot-key" sends one key far
// under its limit and reports the Redis calls each decision made.
//
//	go test -run '^$' -bench Stack -benchtime 3s ./pipeline
func BenchmarkStack(b *testing.B) {
	srv := redistest.Standalone(b)
	p, err := pipeline.New(b.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}}, Fleet: limit.Fleet{Gateways: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:key_%08x", i*2654435761)
	}
	// Quiet keys: 9 a second leases batches of one (rate / 10), so both
	// runs make one Redis call per decision and the difference is the
	// layers' own cost.
	limits := []limit.Limit{
		{Name: "s", Count: 9, Period: time.Second, Burst: 1000},
		{Name: "m", Count: 50_000, Period: time.Minute},
	}
	for _, tc := range []struct {
		name  string
		store limit.Store
	}{{"bare", p.Redis()}, {"pipeline", p}} {
		b.Run(tc.name, func(b *testing.B) {
			before := scriptCalls(b, srv)
			defer func() {
				b.ReportMetric(float64(scriptCalls(b, srv)-before)/float64(b.N), "redis-calls/decision")
			}()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					i++
					req := limit.Request{Key: keys[i%len(keys)], Limits: limits}
					if _, err := tc.store.Take(b.Context(), &req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("hot-key", func(b *testing.B) {
		before := scriptCalls(b, srv)
		req := limit.Request{Key: "k:hot", Limits: []limit.Limit{{Name: "s", Count: 1_000_000_000, Period: time.Second}}}
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r := req
				if d, err := p.Take(b.Context(), &r); err != nil || !d.Allowed {
					b.Errorf("%+v, %v", d, err)
					return
				}
			}
		})
		b.ReportMetric(float64(scriptCalls(b, srv)-before)/float64(b.N), "redis-calls/decision")
	})
}

// scriptCalls is how many scripts the server has run (INFO commandstats).
func scriptCalls(b *testing.B, srv *redistest.Server) int64 {
	v, err := srv.Do(b.Context(), "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	s, _ := v.(string)
	var n int64
	for line := range strings.Lines(s) {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				c, _ := strconv.ParseInt(calls, 10, 64)
				n += c
			}
		}
	}
	return n
}
