package redistest

import "syscall"

// procAttr makes the kernel kill redis-server when the test binary dies, so
// a test run killed by its timeout leaves no servers behind. (Pdeathsig
// follows the thread that started the process; Go's threads outlive the
// tests that use them, so this holds in practice, and the cleanups stay the
// normal way servers end.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
