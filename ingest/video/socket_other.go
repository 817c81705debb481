//go:build !linux

package video

import "net"

// tuneSocket asks for a receive buffer of size bytes; drop counting is Linux-only.
func tuneSocket(c *net.UDPConn, size int) int {
	_ = c.SetReadBuffer(size)
	return size
}

// kernelDrops is not reported outside Linux.
func kernelDrops(oob []byte) int64 { return -1 }
