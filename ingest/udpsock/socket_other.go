//go:build !linux

package udpsock

import "net"

// Tune asks for a receive buffer of size bytes; drop counting is Linux-only.
func Tune(c *net.UDPConn, size int) int {
	_ = c.SetReadBuffer(size)
	return size
}

// KernelDrops is not reported outside Linux.
func KernelDrops(oob []byte) int64 { return -1 }
