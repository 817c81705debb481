//go:build linux

package udpsock

import (
	"encoding/binary"
	"net"
	"syscall"
)

// Tune asks for a receive buffer of size bytes (SO_RCVBUFFORCE when
// privileged, else SO_RCVBUF capped by net.core.rmem_max), turns on
// SO_RXQ_OVFL drop counting, and returns the buffer the kernel granted.
func Tune(c *net.UDPConn, size int) int {
	granted := 0
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	_ = rc.Control(func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size) != nil {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1)
		granted, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	return granted
}

// KernelDrops returns the cumulative drop count of the socket carried in
// a datagram's control data (SO_RXQ_OVFL), or -1 if absent.
func KernelDrops(oob []byte) int64 {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_RXQ_OVFL && len(m.Data) >= 4 {
			return int64(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return -1
}
