//go:build !linux

package redisstore

import "syscall"

// receivedBytes is 0 where the kernel's count is not read: only the bytes
// this process has read count as heard.
func receivedBytes(uintptr) int64 { return 0 }

// connected is false where the kernel's TCP state is not read: a connect
// that takes long reads as a stall.
func connected(syscall.RawConn) bool { return false }
