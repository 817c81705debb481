package agent

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimiter bounds the open HTTP connections so that a slowloris
// cannot starve a probe: when maxHTTPConns are open, the next connection
// is accepted by closing the one that has waited longest for a request —
// one that sends its headers a byte at a time, an idle keep-alive —
// once it has waited evictAfter, never one whose request is being served;
// until then the newcomer waits in the kernel's accept queue. Hundreds of
// connections that never finish a request, reopened as they close, so
// churn through their own slots (64 every evictAfter) while a probe's
// connection, which sends its request at once, is served: /healthz keeps
// answering. (A limit that only makes new connections wait, as a
// LimitListener does, leaves the probe queued behind the attack until
// the header timeout frees slots.)
type connLimiter struct {
	net.Listener
	max int
	mu  sync.Mutex
	// waiting are the connections not serving a request, oldest first.
	waiting *list.List
	open    int
	// evicted counts connections closed to make room.
	evicted uint64
}

// evictAfter is how long a connection must have waited for a request
// before a newcomer may take its slot.
const evictAfter = 100 * time.Millisecond

// trackedConn is one accepted connection.
type trackedConn struct {
	net.Conn
	l       *connLimiter
	el      *list.Element // in l.waiting while not serving; nil while serving
	since   time.Time     // when it started waiting (l.mu)
	closed  bool
	serving int
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, waiting: list.New()}
}

// Accept waits for a free slot (or one to evict), then accepts.
func (l *connLimiter) Accept() (net.Conn, error) {
	if victim := l.room(); victim != nil {
		victim.Close()
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.mu.Lock()
		l.open--
		l.mu.Unlock()
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	tc.since, tc.el = time.Now(), l.waiting.PushBack(tc)
	l.mu.Unlock()
	return tc, nil
}

// room reserves a slot for the next connection, returning the
// connection to close for it, if any.
func (l *connLimiter) room() (victim *trackedConn) {
	for {
		wait := 10 * time.Millisecond
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			l.mu.Unlock()
			return nil
		}
		if f := l.waiting.Front(); f != nil {
			tc := f.Value.(*trackedConn)
			if w := evictAfter - time.Since(tc.since); w > 0 {
				wait = min(wait, w)
			} else {
				l.waiting.Remove(f)
				tc.el = nil
				l.evicted++
				l.open++ // the victim's Close gives its slot back
				l.mu.Unlock()
				return tc
			}
		}
		l.mu.Unlock()
		time.Sleep(wait)
	}
}

// Evicted is the number of connections closed to make room.
func (l *connLimiter) Evicted() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// serve marks the connection as serving a request until the returned
// func is called; then it waits again for the next request, at the back.
func (c *trackedConn) serve() (done func()) {
	l := c.l
	l.mu.Lock()
	c.serving++
	if c.el != nil {
		l.waiting.Remove(c.el)
		c.el = nil
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if c.serving--; c.serving == 0 && !c.closed && c.el == nil {
			c.since, c.el = time.Now(), l.waiting.PushBack(c)
		}
	}
}

func (c *trackedConn) Close() error {
	l := c.l
	l.mu.Lock()
	if !c.closed {
		c.closed = true
		l.open--
		if c.el != nil {
			l.waiting.Remove(c.el)
			c.el = nil
		}
	}
	l.mu.Unlock()
	return c.Conn.Close()
}

type connKey struct{}

// connContext puts the tracked connection in each request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// serving marks each request's connection as serving while h runs.
func serving(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			defer tc.serve()()
		}
		h.ServeHTTP(w, r)
	})
}

// httpHeaderTimeout is how long a connection may take to send a request's
// headers (a slowloris is cut after it, and earlier under the limit).
const httpHeaderTimeout = 5 * time.Second
