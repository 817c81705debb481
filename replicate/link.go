package replicate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// link is a sink's connection to the centre. nats.go reconnects a dropped
// connection by itself, but some server errors (a protocol line over the
// server's limit, an unknown protocol error) make it close the connection
// for good; retrying on it would be retrying forever. The link replaces a
// closed connection with a new one dialed with the same options, the next
// time the sink needs it. It also turns every disconnect into closing lost,
// which aborts the requests in flight: their answers can never come over
// the new connection, and waiting out a timeout would delay the recovery.
// Its methods are safe for concurrent use.
type link struct {
	timeout time.Duration

	mu sync.Mutex
	// nc and js are the current connection and its JetStream context.
	// Guarded by mu.
	nc *nats.Conn
	js jetstream.JetStream
	// status is nc's status listener; done is closed when its watcher
	// ends. Guarded by mu.
	status chan nats.Status
	done   chan struct{}
	// lost is closed (and replaced) on every disconnect. Guarded by mu.
	lost chan struct{}
	// owned are the connections the link dialed; close closes them (the
	// first one is the caller's). Guarded by mu.
	owned []*nats.Conn
	// closed is set by close. Guarded by mu.
	closed bool

	// replaced counts closed connections replaced by new ones.
	replaced atomic.Uint64
}

func newLink(nc *nats.Conn, timeout time.Duration) (*link, error) {
	l := &link{timeout: timeout, lost: make(chan struct{})}
	if err := l.attach(nc); err != nil {
		return nil, err
	}
	return l, nil
}

// attach makes nc the current connection. Lock should be held (or l not
// yet shared).
func (l *link) attach(nc *nats.Conn) error {
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(l.timeout))
	if err != nil {
		return fmt.Errorf("replicate: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	l.status = nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	l.done = make(chan struct{})
	go l.watch(l.status, l.done)
	return nil
}

// watch closes lost on every status change of one connection until it
// closes or its listener is removed.
func (l *link) watch(status chan nats.Status, done chan struct{}) {
	defer close(done)
	for st := range status {
		l.mu.Lock()
		close(l.lost)
		l.lost = make(chan struct{})
		l.mu.Unlock()
		if st == nats.CLOSED {
			return
		}
	}
}

// get returns the current connection, first replacing it when it is
// closed.
func (l *link) get() (*nats.Conn, jetstream.JetStream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, ErrClosed
	}
	if !l.nc.IsClosed() {
		return l.nc, l.js, nil
	}
	old := l.nc
	nc, err := old.Opts.Connect()
	if err != nil {
		return nil, nil, fmt.Errorf("replicate: replace the closed central connection (%v): %w", old.LastError(), err)
	}
	old.RemoveStatusListener(l.status)
	if err := l.attach(nc); err != nil {
		nc.Close()
		return nil, nil, err
	}
	l.owned = append(l.owned, nc)
	l.replaced.Add(1)
	return nc, l.js, nil
}

// conn is the current connection without replacing it (for status).
func (l *link) conn() *nats.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nc
}

// ctx derives a context that ends when the link drops.
func (l *link) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-lost:
			cancel(errLinkLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// close stops the watcher and closes the connections the link dialed
// (the first connection is the caller's). It is idempotent.
func (l *link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	nc, status, done, owned := l.nc, l.status, l.done, l.owned
	l.mu.Unlock()
	nc.RemoveStatusListener(status)
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	for _, c := range owned {
		c.Close()
	}
}
