package redisstore_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/redisstore"
)

// perMinute is the limit the algorithm measurements use: 1,000 a minute,
// the typical limit of the reference design.
func perMinute(alg limit.Algorithm) limit.Limit {
	return limit.Limit{Name: "m", Count: 1000, Period: time.Minute, Algorithm: alg}
}

// benchRound makes every run of a benchmark use keys of its own, so that
// one run's states never carry into the next.
var benchRound atomic.Int64

// BenchmarkAlgorithms measures Take on one standalone server for every
// algorithm side by side, with Redis's clock as in production and one limit
// of 1,000 a minute over 1,024 keys:
//
//   - within: keys with room, so every take is allowed and writes its state;
//   - over: keys already at their limit (a sliding log holding 1,000
//     entries), so takes are refused and only read, as for a client far
//     over its limit (a bucket still admits the token it regains each 60ms).
//
// It reports checks/s beside ns/op: what this client machine gets, much the
// same for every algorithm when the client is the bottleneck. It also
// reports the server's own time per script call (redis-µs/call), which is
// what bounds a shard and what differs between algorithms. The figures in
// docs/algorithms.md come from this run, beside the do-nothing script:
//
//	go test ./redisstore -run '^$' -bench 'BenchmarkAlgorithms|BenchmarkEvalshaTrivial/Standalone/parallel' -benchtime 5s -count 3
func BenchmarkAlgorithms(b *testing.B) {
	s := newStore(b, redisstore.Config{Addrs: targets[0].addrs()})
	for _, scenario := range []string{"within", "over"} {
		for _, alg := range limit.Algorithms {
			b.Run(scenario+"/"+string(alg), func(b *testing.B) {
				l := perMinute(alg)
				var keys [benchKeys]string
				round := benchRound.Add(1)
				for i := range keys {
					keys[i] = fmt.Sprintf("algbench-%d-%d", round, i)
					if scenario == "over" {
						req := limit.Request{Key: keys[i], Cost: l.Count, Limits: []limit.Limit{l}}
						if d, err := s.Take(context.Background(), &req); err != nil || !d.Allowed {
							b.Fatalf("filling %s: allowed %v, error %v", keys[i], d.Allowed, err)
						}
					}
				}
				resetStats(b, targets[0])
				runLatency(b, true, func(ctx context.Context, key int) error {
					req := limit.Request{Key: keys[key], Limits: []limit.Limit{l}}
					d, err := s.Take(ctx, &req)
					// Buckets refill one token each 60ms even when over, so
					// only "within" has a fixed answer.
					if err == nil && !d.Allowed && scenario == "within" {
						err = fmt.Errorf("%s: refused with room to spare", keys[key])
					}
					return err
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
				reportServerTime(b, targets[0])
			})
		}
	}
}

// measureKeys sets how many keys TestMeasureMemory fills per algorithm. The
// default keeps the suite fast; the figures in docs/algorithms.md come from
//
//	go test ./redisstore -run TestMeasureMemory -v -measure.keys 5000
//
// (the sliding log fills a tenth as many keys: each holds 1,000 entries).
var measureKeys = flag.Int("measure.keys", 8, "keys per algorithm TestMeasureMemory fills")

// TestMeasureMemory fills keys of every algorithm on a fresh server the way
// a limit of 1,000 a minute leaves them (the sliding log with 1,000
// entries, the sliding window with both counters set) and reports their
// size two ways: MEMORY USAGE of each key, and the server's used_memory
// growth per key from an empty keyspace, which adds the expiry table and
// the tables' free slots. The request keys are shaped as the gateway's:
// "k:" and a 24-character API key, and "ip:" and an IPv4 address. It
// checks the shape of what it measured; the sizes go to the log.
func TestMeasureMemory(t *testing.T) {
	srv := redistest.Standalone(t)
	clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC))
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}, Now: clk.Now})
	rng := rand.New(rand.NewPCG(1, 2))
	var report strings.Builder
	fmt.Fprintf(&report, "%-15s %-22s %6s %12s %16s %14s\n", "algorithm", "request key", "keys", "MEMORY USAGE", "used_memory/key", "1M keys")
	usage := map[limit.Algorithm]int64{}
	// Load the script and grow the server's buffers before measuring, so
	// that the first algorithm does not pay for them.
	for _, alg := range limit.Algorithms {
		parallelTakes(t, s, []string{"warm-up"}, 1, perMinute(alg))
	}
	shapes := []struct {
		name string
		key  func() string
	}{
		{"k:key_<24 hex>", func() string { return fmt.Sprintf("k:key_%024x", rng.Uint64()) }},
		{"ip:<IPv4>", func() string {
			return fmt.Sprintf("ip:%d.%d.%d.%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), rng.IntN(256))
		}},
	}
	for _, shape := range shapes {
		for _, alg := range limit.Algorithms {
			l := perMinute(alg)
			n, takes, cost, step := *measureKeys, 3, int64(1), 35*time.Second
			if alg == limit.SlidingLog {
				// 1,000 entries, 100 takes of 10 spread over the minute.
				n, takes, cost, step = max(*measureKeys/10, 2), 100, 10, 600*time.Millisecond
			}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = shape.key()
			}
			// Each algorithm starts from an empty keyspace, so that all of them
			// pay alike for the keyspace and expiry tables growing.
			if _, err := srv.Do(t.Context(), "FLUSHALL", "SYNC"); err != nil {
				t.Fatalf("FLUSHALL: %v", err)
			}
			before := usedMemory(t, srv)
			for range takes {
				parallelTakes(t, s, keys, cost, l)
				clk.Advance(step)
			}
			after := usedMemory(t, srv)
			var total int64
			for _, k := range keys {
				rk := s.RedisKey(k, &l)
				v, err := srv.Do(t.Context(), "MEMORY", "USAGE", rk, "SAMPLES", "0")
				b, ok := v.(int64)
				if err != nil || !ok || b <= 0 {
					t.Fatalf("MEMORY USAGE %s: %v, %v; want a size (did the take store nothing?)", rk, v, err)
				}
				total += b
			}
			if alg == limit.SlidingLog {
				rk := s.RedisKey(keys[0], &l)
				if v, err := srv.Do(t.Context(), "LLEN", rk); err != nil || v != int64(1000) {
					t.Fatalf("LLEN %s = %v, %v; want 1000 entries", rk, v, err)
				}
			}
			usage[alg] = total / int64(n)
			perKey := (after - before) / int64(n)
			fmt.Fprintf(&report, "%-15s %-22s %6d %10d B %14d B %14s\n", alg, shape.name, n, usage[alg], perKey, scaled(perKey*1_000_000))
		}
		if usage[limit.SlidingLog] < 10*usage[limit.TokenBucket] {
			t.Errorf("%s: a 1,000-entry sliding log uses %d bytes, a token bucket %d: want the log at least 10 times larger",
				shape.name, usage[limit.SlidingLog], usage[limit.TokenBucket])
		}
	}
	t.Log("\n" + report.String())
}

// parallelTakes takes cost from limit l of every key, eight at a time.
func parallelTakes(t *testing.T, s *redisstore.Store, keys []string, cost int64, l limit.Limit) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				req := limit.Request{Key: keys[i], Cost: cost, Limits: []limit.Limit{l}}
				if _, err := s.Take(t.Context(), &req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	v, err := srv.Do(t.Context(), "INFO", "memory")
	info, ok := v.(string)
	if err != nil || !ok {
		t.Fatalf("INFO memory: %v, %v", v, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, found := strings.CutPrefix(line, "used_memory:"); found {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				t.Fatalf("INFO memory: used_memory %q: %v", rest, err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no used_memory: %q", info)
	return 0
}

// scaled formats a byte count in MB or GB.
func scaled(b int64) string {
	if b >= 10_000_000_000 {
		return fmt.Sprintf("%.1f GB", float64(b)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(b)/1e6)
}
