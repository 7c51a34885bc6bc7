//go:build !linux

package redistest

import "syscall"

// procAttr has nothing to add where the kernel cannot kill children with
// their parent; the cleanups alone stop the servers.
func procAttr() *syscall.SysProcAttr { return nil }
