package udpsock

import (
	"errors"
	"net"
	"time"

	"golang.org/x/net/ipv4"
)

// Reader reads a socket's datagrams in batches (recvmmsg on Linux) into
// buffers it reuses, each with room for its control data (the kernel's
// drop count, KernelDrops). One reader a socket; not safe for
// concurrent use.
type Reader struct {
	pc   *ipv4.PacketConn
	msgs []ipv4.Message
}

// NewReader reads c in batches of batch datagrams of at most size bytes.
func NewReader(c *net.UDPConn, batch, size int) *Reader {
	r := &Reader{pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, batch)}
	for i := range r.msgs {
		r.msgs[i].Buffers = [][]byte{make([]byte, size)}
		r.msgs[i].OOB = make([]byte, 64)
	}
	return r
}

// Read returns the next batch (valid until the next Read). A transient
// error — an ICMP error a connected socket reports (its server is not up
// yet), ENOBUFS — is told to onError (if set) and Read tries again after
// pause; ok is false once the socket is closed or stop is.
func (r *Reader) Read(stop <-chan struct{}, pause time.Duration, onError func(error)) (msgs []ipv4.Message, ok bool) {
	for {
		n, err := r.pc.ReadBatch(r.msgs, 0)
		if err == nil {
			return r.msgs[:n], true
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, false
		}
		select {
		case <-stop:
			return nil, false
		default:
		}
		if onError != nil {
			onError(err)
		}
		time.Sleep(pause)
	}
}
