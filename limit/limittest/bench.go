package limittest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// CPUTime returns the CPU time this process has used so far, user and
// system. A benchmark reports it per op (ReportCPU) beside ns/op: on a
// machine that other work shares, wall time per op counts that work too,
// and CPU time does not.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports the process's CPU time since start (a CPUTime
// reading) per op of b, as the metric cpu-ns/op.
func ReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(CPUTime()-start)/float64(b.N), "cpu-ns/op")
}

// Plenty is a shared store (a limit.Granter) that allows every request
// at once and grants all it is asked for, doing nothing but answering
// Remaining: a layer benchmarked over it costs only its own work.
type Plenty struct{ Remaining int64 }

// Take allows req.
func (p Plenty) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{Allowed: true, Remaining: p.Remaining, Source: limit.FromRedis}, nil
}

// TakeUpTo grants want.
func (p Plenty) TakeUpTo(_ context.Context, _ *limit.Request, want int64) (int64, limit.Decision, error) {
	return want, limit.Decision{Allowed: true, Remaining: p.Remaining, Source: limit.FromRedis}, nil
}
