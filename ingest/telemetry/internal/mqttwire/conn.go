package mqttwire

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// paho reads a packet's fixed header one byte at a time and writes each
// packet (every PUBACK) with its own syscall. At thousands of messages per
// second those syscalls are most of the client's CPU. BufferedConn reads
// through a buffer and coalesces writes: a flusher goroutine writes out
// whatever accumulated since its last write, so an idle link flushes at once
// and a busy one sends many PUBACKs per syscall.
type BufferedConn struct {
	net.Conn
	// R reads through the buffer (Read reads it too).
	R *bufio.Reader

	// mu guards the fields below; cond signals space and flushes.
	mu   sync.Mutex
	cond *sync.Cond
	// pending are the bytes written and not yet flushed.
	pending []byte
	// flushing is set while the flusher writes outside the lock.
	flushing bool
	// err is the first write error (sticky).
	err error
	// closed stops the flusher after a last flush.
	closed bool
	// wake nudges the flusher (capacity 1); done is closed when it exits.
	wake chan struct{}
	done chan struct{}
	// server: Write never blocks; above MaxPendingWrite unflushed bytes
	// the peer is not reading, and the connection is failed with
	// ErrSlowReader (the listener's writers must not wait on one peer).
	server bool
}

// MaxPendingWrite bounds the unflushed bytes: a client's Write blocks
// above it, a server connection fails (ErrSlowReader).
const MaxPendingWrite = 1 << 20

// NewBufferedConn wraps a client's connection: a 64 KiB read buffer,
// writes that wait above MaxPendingWrite.
func NewBufferedConn(c net.Conn) *BufferedConn { return wrapConn(c, 64<<10, false) }

// NewServerConn wraps a listener's connection: a smaller read buffer (one
// per publisher) and writes that never block.
func NewServerConn(c net.Conn) *BufferedConn { return wrapConn(c, 16<<10, true) }

// wrapConn wraps c with a read buffer of readSize and starts its flusher.
func wrapConn(c net.Conn, readSize int, server bool) *BufferedConn {
	b := &BufferedConn{Conn: c, R: bufio.NewReaderSize(c, readSize), wake: make(chan struct{}, 1), done: make(chan struct{}), server: server}
	b.cond = sync.NewCond(&b.mu)
	go b.flushLoop()
	return b
}

// Slow reports whether the connection failed with ErrSlowReader.
func (b *BufferedConn) Slow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err == ErrSlowReader
}

func (b *BufferedConn) Read(p []byte) (int, error) { return b.R.Read(p) }

// Write queues p for the flusher. It returns the first write error, if any.
func (b *BufferedConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.server && b.err == nil && len(b.pending) > MaxPendingWrite {
		b.err = ErrSlowReader
		b.Conn.Close() // the reader and the flusher fail; Close still joins the flusher
	}
	for b.err == nil && !b.closed && len(b.pending) > MaxPendingWrite {
		b.cond.Wait()
	}
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	if b.closed {
		b.mu.Unlock()
		return 0, net.ErrClosed
	}
	b.pending = append(b.pending, p...)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (b *BufferedConn) flushLoop() {
	defer close(b.done)
	var spare []byte
	for {
		<-b.wake
		// Let the writers that are ready run first: under load one write
		// then carries many packets; idle, it costs one scheduler round.
		runtime.Gosched()
		b.mu.Lock()
		out := b.pending
		b.pending = spare[:0]
		closed := b.closed
		b.flushing = len(out) > 0
		b.mu.Unlock()
		if len(out) > 0 {
			_, err := b.Conn.Write(out)
			b.mu.Lock()
			if err != nil && b.err == nil {
				b.err = err
			}
			b.flushing = false
			b.cond.Broadcast()
			b.mu.Unlock()
		}
		spare = out
		if closed {
			return
		}
	}
}

// Close flushes what is pending (for at most a second) and closes. Every
// call, concurrent ones too, returns only after the flush: paho closes the
// connection from more than one goroutine, and the DISCONNECT packet must
// reach the broker first (or it publishes the client's last will).
func (b *BufferedConn) Close() error {
	b.mu.Lock()
	already := b.closed
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
	if !already {
		_ = b.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	<-b.done
	if b.server && !already {
		lingeringClose(b.Conn)
	}
	return b.Conn.Close()
}

// lingeringClose half-closes c and reads what the client still sends,
// for at most lingerTime and lingerBytes, before c is closed: a socket
// closed with unread input makes the kernel answer with a reset, which
// drops what was written and not yet sent — the PUBACKs queued last, at a
// graceful stop whose publisher had sent more than was read — and a
// client that gets the reset may discard what it had received but not
// read (Apache's lingering close, for the same reason). After the
// half-close the client reads every ack and then EOF; it closes its side
// and the read here ends at once.
func lingeringClose(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

// lingerTime and lingerBytes bound lingeringClose: a client that neither
// closes nor stops sending is cut off after them.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 1 << 20
)
