package redistest

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Favour runs the server's main thread ahead of everything else on the
// machine (SCHED_FIFO, or nice -10 where that is refused), so that it
// answers as a redis-server on a machine of its own would, whatever other
// tests share the cores. Redis waits in epoll between commands, so it takes
// the CPU only when it has work. Both need root; the error says what was
// refused, and the server then keeps its priority.
func (s *Server) Favour() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return errors.New("redistest: favour: the server is not running")
	}
	attr := unix.SchedAttr{Size: uint32(unsafe.Sizeof(unix.SchedAttr{})), Policy: unix.SCHED_FIFO, Priority: 10}
	fifo := unix.SchedSetAttr(p.Pid, &attr, 0)
	if fifo == nil {
		return nil
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, p.Pid, -10); err != nil {
		return fmt.Errorf("redistest: redis-server %d: real-time scheduling refused (%v), and a raised priority too: %w", p.Pid, fifo, err)
	}
	return nil
}
