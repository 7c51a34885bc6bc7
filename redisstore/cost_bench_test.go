package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// costLimits are token buckets that never refuse in a benchmark and refill
// so slowly that their states stay in Redis between takes: every take reads
// a state, refills it, and writes it back, the full path of an allowed take.
var costLimits = []limit.Limit{
	{Name: "m", Count: 1, Period: time.Minute, Burst: 1_000_000},
	{Name: "h", Count: 1, Period: 2 * time.Minute, Burst: 500_000},
	{Name: "d", Count: 1, Period: 3 * time.Minute, Burst: 300_000},
	{Name: "w", Count: 1, Period: 4 * time.Minute, Burst: 250_000},
}

// gatewayKeys returns n request keys shaped like the gateway's: "k:" and
// a 24-character API key.
func gatewayKeys(n int, round string) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:key_%s%018x", round, i)
	}
	return keys
}

// serverStats is what the standalone server counted for a phase of a
// benchmark: calls and µs of the take's command (FCALL or EVALSHA, by
// commandstats), and the process's CPU µs (INFO cpu, user + system).
type serverStats struct{ calls, usec, cpu float64 }

// readStats reads the standalone server's counters: commandstats of
// EVALSHA and FCALL summed, and used CPU.
func readStats(b testing.TB) serverStats {
	v, err := standalone.Do(context.Background(), "INFO", "all")
	if err != nil {
		b.Fatal(err)
	}
	info, _ := v.(string)
	var st serverStats
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			st.cpu += parseFloat(b, rest) * 1e6
		} else if rest, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			st.cpu += parseFloat(b, rest) * 1e6
		}
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_fcall:"} {
			rest, ok := strings.CutPrefix(line, cmd)
			if !ok {
				continue
			}
			for field := range strings.SplitSeq(rest, ",") {
				if n, ok := strings.CutPrefix(field, "calls="); ok {
					st.calls += parseFloat(b, n)
				} else if us, ok := strings.CutPrefix(field, "usec="); ok {
					st.usec += parseFloat(b, us)
				}
			}
		}
	}
	return st
}

func parseFloat(b testing.TB, s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		b.Fatalf("INFO field %q: %v", s, err)
	}
	return f
}

// phase runs op n times from 16 goroutines over keys and returns what the
// server counted meanwhile, after resetting its command statistics.
func phase(b *testing.B, n int, keys int, op func(ctx context.Context, key int) error) serverStats {
	ctx := context.Background()
	if _, err := standalone.Do(ctx, "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	before := readStats(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			key := w * 7919
			for next.Add(1) <= int64(n) {
				key = (key + 1) % keys
				if err := op(ctx, key); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	after := readStats(b)
	return serverStats{calls: after.calls, usec: after.usec, cpu: after.cpu - before.cpu}
}

// BenchmarkScriptCost measures what one take costs Redis, against EVALSHA
// of "return 1" with the same keys from the same client in the same run:
// the cost of a call that does nothing. It runs 1, 2 and 4 token-bucket
// limits per request, each a state read and written, as the store runs
// them (functions: FCALL) and as it runs them on a server before Redis 7
// (scripts: EVALSHA of the same code). The two alternate in four rounds,
// so that a change in the machine's load falls on both. It reports, per
// call, the server's own time (redis-µs/call, commandstats; trivial-µs/call
// the do-nothing script's) and their ratio, and the server process's CPU
// (INFO cpu, which adds reading and writing the connections). floor-ratio
// is the same ratio for FloorScript, the commands any take must run and
// nothing else, in the same rounds: how far the take's own work is from
// nothing. The figures
// in docs/redis.md come from
//
//	go test ./redisstore -run '^$' -bench BenchmarkScriptCost -benchtime 40000x -count 5
func BenchmarkScriptCost(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		for _, mode := range []string{"functions", "scripts"} {
			b.Run(fmt.Sprintf("limits=%d/%s", n, mode), func(b *testing.B) {
				s := newStore(b, redisstore.Config{Addrs: []string{standalone.Addr()}})
				if mode == "scripts" {
					redisstore.UseScripts(s)
				}
				trivial, floor := redisstore.TrivialScript(s), redisstore.FloorScript(s)
				keys := gatewayKeys(benchKeys, strconv.FormatInt(benchRound.Add(1), 36))
				trivialKeys := make([][]string, len(keys))
				floorKeys := make([][]string, len(keys))
				for i, k := range keys {
					for j := range n {
						trivialKeys[i] = append(trivialKeys[i], s.RedisKey(k, &costLimits[j]))
						floorKeys[i] = append(floorKeys[i], s.RedisKey(k, &costLimits[j])+":floor")
					}
				}
				takeOp := func(ctx context.Context, key int) error {
					req := limit.Request{Key: keys[key], Limits: costLimits[:n]}
					d, err := s.Take(ctx, &req)
					if err == nil && !d.Allowed {
						err = fmt.Errorf("%s refused", keys[key])
					}
					return err
				}
				trivialOp := func(ctx context.Context, key int) error { return trivial(ctx, trivialKeys[key]) }
				floorOp := func(ctx context.Context, key int) error { return floor(ctx, floorKeys[key]) }
				// Every key gets its states before the measured rounds.
				phase(b, len(keys), len(keys), takeOp)
				const rounds = 4
				var take, none, bare serverStats // the take, the trivial script, the floor
				add := func(sum *serverStats, st serverStats) {
					sum.calls, sum.usec, sum.cpu = sum.calls+st.calls, sum.usec+st.usec, sum.cpu+st.cpu
				}
				b.ReportAllocs()
				b.ResetTimer()
				for r := range rounds {
					chunk := b.N/rounds + min(1, b.N%rounds/(r+1))
					b.StartTimer()
					st := phase(b, chunk, len(keys), takeOp)
					b.StopTimer()
					add(&take, st)
					add(&none, phase(b, chunk, len(keys), trivialOp))
					add(&bare, phase(b, chunk, len(keys), floorOp))
				}
				if take.calls == 0 || none.calls == 0 {
					b.Fatalf("commandstats counted %v takes and %v trivial calls", take.calls, none.calls)
				}
				b.ReportMetric(take.usec/take.calls, "redis-µs/call")
				b.ReportMetric(none.usec/none.calls, "trivial-µs/call")
				b.ReportMetric(take.usec/take.calls/(none.usec/none.calls), "ratio")
				b.ReportMetric(bare.usec/bare.calls/(none.usec/none.calls), "floor-ratio")
				b.ReportMetric(take.cpu/take.calls, "cpu-µs/call")
				b.ReportMetric(take.cpu/take.calls/(none.cpu/none.calls), "cpu-ratio")
				b.ReportMetric(bare.cpu/bare.calls/(none.cpu/none.calls), "floor-cpu-ratio")
			})
		}
	}
}

// BenchmarkQuietKeys measures decisions a second through the store alone
// with 10,000 gateway-shaped keys that each see a request now and then, a
// fleet's usual traffic: a limit of 10 a second refills within 100 ms, so
// most takes find no state and write a fresh one. Beside it, in the same
// run, from the same client and goroutines and alternating in four rounds,
// two ceilings: FloorScript with the same keys (TIME, GET and PSETEX of
// each, the bare commands a take must run: of-bare-%) and EVALSHA of
// "return 1" (the round trip alone: of-trivial-%). ns/op is the store's
// alone.
//
//	go test ./redisstore -run '^$' -bench BenchmarkQuietKeys -benchtime 40000x -count 5
func BenchmarkQuietKeys(b *testing.B) {
	quiet := []limit.Limit{
		{Name: "s", Count: 10, Period: time.Second, Burst: 20},
		{Name: "m", Count: 300, Period: time.Minute},
	}
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("limits=%d", n), func(b *testing.B) {
			s := newStore(b, redisstore.Config{Addrs: []string{standalone.Addr()}})
			trivial, floor := redisstore.TrivialScript(s), redisstore.FloorScript(s)
			keys := gatewayKeys(10_000, strconv.FormatInt(benchRound.Add(1), 36))
			otherKeys := make([][]string, len(keys))
			for i, k := range keys {
				for j := range n {
					otherKeys[i] = append(otherKeys[i], s.RedisKey(k, &quiet[j])+":floor")
				}
			}
			ops := []func(ctx context.Context, key int) error{
				func(ctx context.Context, key int) error {
					req := limit.Request{Key: keys[key], Limits: quiet[:n]}
					_, err := s.Take(ctx, &req)
					return err
				},
				func(ctx context.Context, key int) error { return floor(ctx, otherKeys[key]) },
				func(ctx context.Context, key int) error { return trivial(ctx, otherKeys[key]) },
			}
			const rounds = 4
			var took [3]time.Duration
			var calls int
			b.ReportAllocs()
			b.ResetTimer()
			b.StopTimer()
			for r := range rounds {
				chunk := b.N/rounds + min(1, b.N%rounds/(r+1))
				calls += chunk
				for i, op := range ops {
					began := time.Now()
					if i == 0 {
						b.StartTimer()
					}
					phase(b, chunk, len(keys), op)
					if i == 0 {
						b.StopTimer()
					}
					took[i] += time.Since(began)
				}
			}
			rate := func(i int) float64 { return float64(calls) / took[i].Seconds() }
			b.ReportMetric(rate(0), "decisions/s")
			b.ReportMetric(rate(1), "bare/s")
			b.ReportMetric(rate(2), "trivial/s")
			b.ReportMetric(100*rate(0)/rate(1), "of-bare-%")
			b.ReportMetric(100*rate(0)/rate(2), "of-trivial-%")
		})
	}
}
