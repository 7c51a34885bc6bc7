package pipeline_test

import (
	"syscall"
	"testing"
)

// lowPriority gives the calling OS thread the lowest scheduling priority
// (nice 19). The caller has locked its goroutine to the thread.
func lowPriority(t *testing.T) {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19); err != nil {
		t.Errorf("nice the spinning thread: %v", err)
	}
}

// favour raises a process's scheduling priority (nice -10), so that the
// redis-server a test starts answers as one on a machine of its own would.
// It needs root; elsewhere it says so and the test runs at equal priority.
func favour(t *testing.T, pid int) {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, -10); err != nil {
		t.Logf("redis-server %d keeps its priority: %v", pid, err)
	}
}
