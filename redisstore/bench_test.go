package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// benchLimits never refuse during a benchmark, so every Take does the full
// read-refill-write path, as an allowed request does; and they refill so
// slowly that their buckets stay in Redis between takes, as a busy key's
// do, instead of expiring and starting afresh each time.
var benchLimits = costLimits[:2]

// benchKeys is how many request keys the benchmarks spread over, so that
// requests reach every primary of the cluster.
const benchKeys = 1024

// BenchmarkTake measures one decision through the Redis store, with
// Redis's clock as in production, serially (the latency of one decision
// alone) and in parallel (throughput with auto-pipelining). Each reports
// p50 and p99 latency. Compare with BenchmarkEvalshaTrivial, run alongside.
func BenchmarkTake(b *testing.B) {
	for _, tg := range targets {
		s := newStore(b, redisstore.Config{Addrs: tg.addrs()})
		var keys [benchKeys]string
		for i := range keys {
			keys[i] = fmt.Sprint("bench-", i)
		}
		for _, n := range []int{1, 2} {
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(fmt.Sprintf("%s/limits=%d/%s", tg.name, n, mode), func(b *testing.B) {
					resetStats(b, tg)
					runLatency(b, mode == "parallel", func(ctx context.Context, key int) error {
						req := limit.Request{Key: keys[key], Limits: benchLimits[:n]}
						_, err := s.Take(ctx, &req)
						return err
					})
					reportServerTime(b, tg)
				})
			}
		}
	}
}

// BenchmarkEvalshaTrivial runs EVALSHA of "return 1" on the same servers
// with the same client, routed like a Take: the round trip and nothing
// else, the ceiling Take is measured against.
func BenchmarkEvalshaTrivial(b *testing.B) {
	for _, tg := range targets {
		s := newStore(b, redisstore.Config{Addrs: tg.addrs()})
		eval := redisstore.TrivialScript(s)
		var keys [benchKeys][]string
		for i := range keys {
			keys[i] = []string{s.RedisKey(fmt.Sprint("bench-", i), &benchLimits[0])}
		}
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(tg.name+"/"+mode, func(b *testing.B) {
				resetStats(b, tg)
				runLatency(b, mode == "parallel", func(ctx context.Context, key int) error {
					return eval(ctx, keys[key])
				})
				reportServerTime(b, tg)
			})
		}
	}
}

// resetStats clears the standalone server's command statistics, so that
// reportServerTime sees only this benchmark's calls.
func resetStats(b *testing.B, tg target) {
	if tg.name != "Standalone" {
		return
	}
	if _, err := standalone.Do(context.Background(), "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
}

// reportServerTime reports how long the standalone server spent in one
// call of the take (FCALL) or of a script (EVALSHA) on average, by its own
// count (INFO commandstats): the call's cost alone, without the network
// and the client, and less disturbed by other load on the machine than the
// client's latency.
func reportServerTime(b *testing.B, tg target) {
	if tg.name != "Standalone" {
		return
	}
	st := readStats(b)
	if st.calls == 0 {
		b.Fatal("INFO commandstats counted no FCALL or EVALSHA")
	}
	b.ReportMetric(st.usec/st.calls, "redis-µs/call")
}

// parallelism is how many goroutines per CPU the parallel benchmarks run:
// a gateway serves many requests at once, and rueidis pipelines their
// commands on shared connections.
const parallelism = 8

// runLatency runs op b.N times, serially or from parallelism×GOMAXPROCS
// goroutines,
// and reports the p50 and p99 of one op's latency. op gets a key index in
// [0, benchKeys); building the key is op's business, and so are its
// allocations. Timing each op costs two clock reads, tens of ns.
func runLatency(b *testing.B, parallel bool, op func(ctx context.Context, key int) error) {
	ctx := context.Background()
	var mu sync.Mutex
	var all []time.Duration
	var next atomic.Int64
	worker := func(more func() bool) {
		lat := make([]time.Duration, 0, 1024)
		key := int(next.Add(7919)) // a prime stride: goroutines start far apart
		for more() {
			key = (key + 1) % benchKeys
			began := time.Now()
			if err := op(ctx, key); err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, time.Since(began))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) { worker(pb.Next) })
	} else {
		i := 0
		worker(func() bool { i++; return i <= b.N })
	}
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkTakeShadow measures a request with an enforced limit and a
// shadow one of the same name: one call, the shadow limit in it (before
// shadow limits rode along, the gateway made a second Take under a key of
// their own; the same benchmark on that version does those two).
func BenchmarkTakeShadow(b *testing.B) {
	s := newStore(b, redisstore.Config{Addrs: []string{standalone.Addr()}})
	shadow := benchLimits[0]
	shadow.Shadow = true
	limits := []limit.Limit{benchLimits[0], shadow}
	var keys [benchKeys]string
	for i := range keys {
		keys[i] = fmt.Sprint("bench-shadow-", i)
	}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			resetStats(b, targets[0])
			startCPU = readStats(b).cpu
			defer reportRequestCost(b)
			runLatency(b, mode == "parallel", func(ctx context.Context, key int) error {
				req := limit.Request{Key: keys[key], Limits: limits}
				_, err := s.Take(ctx, &req)
				return err
			})
		})
	}
}

// reportRequestCost reports what the standalone server counted per op
// since resetStats: take calls (FCALL, EVALSHA) and their µs.
func reportRequestCost(b *testing.B) {
	st := readStats(b)
	b.ReportMetric(st.calls/float64(b.N), "calls/op")
	b.ReportMetric(st.usec/float64(b.N), "redis-µs/op")
	b.ReportMetric((st.cpu-startCPU)/float64(b.N), "redis-cpu-µs/op")
}

// startCPU is the server's used CPU µs when the running benchmark began.
var startCPU float64
