package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// BenchmarkEnvoyRedisCost compares what one rls decision of one descriptor
// costs Redis with what envoyproxy/ratelimit's costs it: INCRBY of the
// descriptor's window key and EXPIRE of it, pipelined, as its
// fixed_cache_impl.go sends them. sluice's takes are the store's calls on
// rls-shaped keys (a key per descriptor, its one limit "d"), for each
// algorithm an rls rule may choose; limits so high no take is refused, so
// every take reads and writes its state. All run from the same client
// process with 16 goroutines over the same 10,000 descriptors, alternating
// in four rounds so that load changes fall on all. It reports, for
// INCRBY+EXPIRE, the Redis process's CPU per decision (INFO cpu, user +
// system: commands, sockets and all, at this load) and the time inside its
// commands (commandstats: what bounds decisions a second on one core at the
// ceiling, where pipelining spreads the socket work over many commands),
// and each algorithm's ratio to them (cpu-x-incrby, cmd-x-incrby).
//
//	go test ./redisstore -run '^$' -bench BenchmarkEnvoyRedisCost -benchtime 40000x -count 3
func BenchmarkEnvoyRedisCost(b *testing.B) {
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{standalone.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	s := newStore(b, redisstore.Config{Addrs: []string{standalone.Addr()}})
	round := strconv.FormatInt(benchRound.Add(1), 36)
	descs := make([]string, benchKeys)
	for i := range descs {
		descs[i] = fmt.Sprintf("rls:edge/remote_address=10.%s.%d.%d", round, i/250, i%250)
	}
	// envoyproxy/ratelimit's key: domain, entries and the window's start.
	window := strconv.FormatInt(time.Now().Unix()/60*60, 10)
	incr := func(ctx context.Context, key int) error {
		k := "edge_" + descs[key] + "_" + window
		for _, r := range raw.DoMulti(ctx, raw.B().Incrby().Key(k).Increment(1).Build(), raw.B().Expire().Key(k).Seconds(60).Build()) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		return nil
	}
	algs := []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.TokenBucket, limit.GCRA}
	takes := make([]func(context.Context, int) error, len(algs))
	for i, alg := range algs {
		lim := []limit.Limit{{Name: "d", Count: 1_000_000, Period: time.Minute, Algorithm: alg}}
		takes[i] = func(ctx context.Context, key int) error {
			d, err := s.Take(ctx, &limit.Request{Key: descs[key], Limits: lim})
			if err == nil && !d.Allowed {
				err = fmt.Errorf("%s refused", descs[key])
			}
			return err
		}
	}
	// Every key gets its states before the measured rounds.
	phase(b, len(descs), len(descs), incr)
	for _, take := range takes {
		phase(b, len(descs), len(descs), take)
	}
	const rounds = 4
	// cpu[0] and own[0] are INCRBY+EXPIRE's, then each algorithm's.
	cpu, own := make([]float64, 1+len(algs)), make([]float64, 1+len(algs))
	ops := append([]func(context.Context, int) error{incr}, takes...)
	b.ReportAllocs()
	b.ResetTimer()
	for r := range rounds {
		chunk := b.N/rounds + min(1, b.N%rounds/(r+1))
		for i, op := range ops {
			cpu[i] += phase(b, chunk, len(descs), op).cpu
			own[i] += commandUsec(b, "cmdstat_incrby:", "cmdstat_expire:", "cmdstat_fcall:", "cmdstat_evalsha:")
		}
	}
	n := float64(b.N)
	b.ReportMetric(cpu[0]/n, "incrby-cpu-µs/decision")
	b.ReportMetric(own[0]/n, "incrby-cmd-µs/decision")
	for i, alg := range algs {
		b.ReportMetric(cpu[1+i]/cpu[0], string(alg)+"-cpu-x-incrby")
		b.ReportMetric(own[1+i]/own[0], string(alg)+"-cmd-x-incrby")
	}
}

// commandUsec sums the usec= of the standalone server's commandstats lines
// that start with one of prefixes: the time Redis spent in those commands
// since the last CONFIG RESETSTAT, without reading and writing sockets.
func commandUsec(b *testing.B, prefixes ...string) float64 {
	v, err := standalone.Do(context.Background(), "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	info, _ := v.(string)
	var usec float64
	for line := range strings.Lines(info) {
		for _, p := range prefixes {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), p)
			if !ok {
				continue
			}
			for field := range strings.SplitSeq(rest, ",") {
				if us, ok := strings.CutPrefix(field, "usec="); ok {
					usec += parseFloat(b, us)
				}
			}
		}
	}
	return usec
}
