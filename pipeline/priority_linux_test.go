package pipeline_test

import (
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lowPriority gives the calling OS thread the lowest scheduling priority
// (nice 19). The caller has locked its goroutine to the thread.
func lowPriority(t *testing.T) {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19); err != nil {
		t.Errorf("nice the spinning thread: %v", err)
	}
}

// favour runs a process's main thread ahead of everything else on the
// machine (SCHED_FIFO, or nice -10 where that is refused), so that the
// redis-server a test starts answers as one on a machine of its own would,
// whatever other tests share the cores. Redis waits in epoll between
// commands, so it takes the CPU only when it has work. Both need root;
// elsewhere the test says so and runs at equal priority.
func favour(t *testing.T, pid int) {
	attr := unix.SchedAttr{Size: uint32(unsafe.Sizeof(unix.SchedAttr{})), Policy: unix.SCHED_FIFO, Priority: 10}
	if err := unix.SchedSetAttr(pid, &attr, 0); err == nil {
		return
	} else {
		t.Logf("redis-server %d: real-time scheduling refused (%v); raising its priority instead", pid, err)
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, -10); err != nil {
		t.Logf("redis-server %d keeps its priority: %v", pid, err)
	}
}
