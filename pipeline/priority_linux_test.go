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
