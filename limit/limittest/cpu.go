package limittest

import (
	"syscall"
	"testing"
	"time"
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
