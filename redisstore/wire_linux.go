package redisstore

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// receivedBytes is how many bytes socket fd has received in all, read or
// not (TCP_INFO's bytes_received), or 0 if the kernel will not say.
func receivedBytes(fd uintptr) int64 {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	return int64(info.Bytes_received)
}

// connected reports whether the socket being connected has finished its
// handshake with the node (TCP state ESTABLISHED), so that only this
// process is left to notice.
func connected(c syscall.RawConn) bool {
	if c == nil {
		return false
	}
	established := false
	c.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		established = err == nil && info.State == unix.BPF_TCP_ESTABLISHED
	})
	return established
}
