package central

import (
	"net"
	"sync"
	"time"
)

// inProcessBuffer bounds the bytes a client's writes may run ahead of the
// server's read loop on an in-process connection.
const inProcessBuffer = 4 << 20

// bufferedConn is the client end of an in-process connection (nats-server
// gives a net.Pipe) with a write buffer in front, as a socket has one in
// the kernel. A net.Pipe write returns only once the server's read loop
// has taken every byte, and nats.go flushes while it holds its connection
// lock: unbuffered, every publisher waits on the server parsing the last
// flush, and the two run in lock step (measured: more CPU per small
// message than TCP loopback). Here Write copies into the buffer and
// returns; one goroutine hands what has gathered to the pipe, so the
// server reads large batches while the client goes on. Write blocks only
// while inProcessBuffer bytes wait. Reads go to the pipe directly.
type bufferedConn struct {
	net.Conn
	mu   sync.Mutex
	cond *sync.Cond
	// Guarded by mu:
	// buf holds the bytes written and not yet handed to the pipe.
	buf []byte
	// err is the pipe's first write error (sticky); closed is set by
	// Close.
	err    error
	closed bool
	// drained is closed when drain returns.
	drained chan struct{}
}

func newBufferedConn(c net.Conn) *bufferedConn {
	b := &bufferedConn{Conn: c, drained: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	go b.drain()
	return b
}

// Write queues p for the pipe; it fails once the pipe has failed or the
// connection is closed.
func (b *bufferedConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.buf) > 0 && len(b.buf)+len(p) > inProcessBuffer && b.err == nil && !b.closed {
		b.cond.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.closed {
		return 0, net.ErrClosed
	}
	b.buf = append(b.buf, p...)
	b.cond.Broadcast()
	return len(p), nil
}

// drain hands the gathered bytes to the pipe until it fails or the
// connection closes and nothing is left.
func (b *bufferedConn) drain() {
	defer close(b.drained)
	var out []byte
	for {
		b.mu.Lock()
		for len(b.buf) == 0 && !b.closed {
			b.cond.Wait()
		}
		if len(b.buf) == 0 {
			b.mu.Unlock()
			return
		}
		out, b.buf = b.buf, out[:0]
		b.cond.Broadcast()
		b.mu.Unlock()
		if _, err := b.Conn.Write(out); err != nil {
			b.mu.Lock()
			b.err = err
			b.cond.Broadcast()
			b.mu.Unlock()
			return
		}
	}
}

// closeWait bounds how long Close waits for the buffered bytes to reach
// the server.
const closeWait = 2 * time.Second

// Close hands what is buffered to the server (as a socket delivers its
// buffer before the close), for closeWait at most, then closes the pipe.
func (b *bufferedConn) Close() error {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-b.drained:
	case <-t.C:
	}
	return b.Conn.Close()
}
