package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/redisstore"
)

// BenchmarkFlushDelay measures write coalescing (Config.FlushDelay) per
// load level: takes from 1, 8 and 32 goroutines per CPU on a standalone
// Redis, without a delay (rueidis's default connections) and with one
// connection and a flush delay. It reports the client's writes per take
// (write(2) calls, each a syscall and a loopback send) and this process's
// CPU time per take (user and system), besides the time per take.
//
//	go test -run '^$' -bench FlushDelay -benchtime 20000x ./redisstore
func BenchmarkFlushDelay(b *testing.B) {
	for _, load := range []int{1, 8, 32} {
		for _, delay := range []time.Duration{0, 20 * time.Microsecond, 100 * time.Microsecond} {
			b.Run(fmt.Sprintf("goroutines-per-cpu=%d/delay=%v", load, delay), func(b *testing.B) {
				benchTakes(b, redisstore.Config{Addrs: []string{standalone.Addr()}, FlushDelay: delay, RueidisTakes: true}, load)
			})
		}
	}
}

// BenchmarkPipe compares takes on the store's own connections (the
// default, direct.go) with takes through rueidis, at 1, 8 and 32
// goroutines per CPU, with BenchmarkFlushDelay's metrics.
//
//	go test -run '^$' -bench Pipe -benchtime 20000x ./redisstore
func BenchmarkPipe(b *testing.B) {
	for _, load := range []int{1, 8, 32} {
		for _, rueidis := range []bool{false, true} {
			b.Run(fmt.Sprintf("goroutines-per-cpu=%d/rueidis=%v", load, rueidis), func(b *testing.B) {
				benchTakes(b, redisstore.Config{Addrs: []string{standalone.Addr()}, RueidisTakes: rueidis}, load)
			})
		}
	}
}

// BenchmarkPipeBusy is BenchmarkPipe's takes on the store's own
// connections with work between them, as a gateway does: each goroutine
// spends about 30 µs of CPU (25,000 rounds of hashing, on the machine of
// issue 28) before each take, under a context that can be cancelled, as
// the guard's. Fewer takes then wait together: at 8 goroutines per CPU
// about 0.2 writes a take, near `sluice gateway --redis` at 16 clients.
//
//	go test -run '^$' -bench PipeBusy -benchtime 20000x ./redisstore
func BenchmarkPipeBusy(b *testing.B) {
	for _, load := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("goroutines-per-cpu=%d", load), func(b *testing.B) {
			benchTakesWork(b, redisstore.Config{Addrs: []string{standalone.Addr()}}, load, 25000)
		})
	}
}

// benchTakes runs b.N takes of one token bucket over benchKeys keys
// from load goroutines per CPU, and reports writes and CPU per take.
func benchTakes(b *testing.B, cfg redisstore.Config, load int) {
	benchTakesWork(b, cfg, load, 0)
}

// benchTakesWork is benchTakes with work rounds of hashing before each
// take.
func benchTakesWork(b *testing.B, cfg redisstore.Config, load, work int) {
	var keys [benchKeys]string
	for i := range keys {
		keys[i] = fmt.Sprint("flush-", i)
	}
	s := newStore(b, cfg)
	var next atomic.Int64
	writes, cpu := redisstore.Writes(s), limittest.CPUTime()
	b.SetParallelism(load)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		if work > 0 {
			// A gateway's take waits under the guard's context, which
			// can be cancelled.
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
		}
		h := uint64(1)
		for pb.Next() {
			for range work {
				h = h*6364136223846793005 + 1442695040888963407
			}
			sink.Add(h)
			req := limit.Request{Key: keys[next.Add(1)%benchKeys], Limits: benchLimits[:1]}
			if _, err := s.Take(ctx, &req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(redisstore.Writes(s)-writes)/float64(b.N), "writes/op")
	limittest.ReportCPU(b, cpu)
}

// sink keeps benchTakesWork's hashing from being optimised away.
var sink atomic.Uint64
