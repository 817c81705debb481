package guard

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// LimiterConfig configures a Limiter. Zero fields take the defaults
// named.
type LimiterConfig struct {
	// Max bounds the connections open at once. At least 1.
	Max int
	// MaxPerSource bounds those from one IP address (one more is
	// refused: one host cannot take every slot). Default Max.
	MaxPerSource int
	// MaxIdle bounds the connections not active (no CONNECT yet, no
	// request being served): a newcomer past it evicts the oldest of
	// them, however recent. Default Max.
	MaxIdle int
	// EvictAfter: when Max are open, a newcomer takes the slot of the
	// connection quiet the longest if it has been quiet this long; else
	// it is refused (or waits: WaitForRoom). Default 0: the longest quiet
	// is evicted at once.
	EvictAfter time.Duration
	// WaitForRoom: when Max are open and none can be evicted yet, the
	// next connection is not accepted (it waits in the kernel's accept
	// queue) until one can; default false: it is accepted and closed at
	// once, counted (a client that redials gets in once one can).
	WaitForRoom bool
	// ReadTimeout: a connection that reads nothing this long fails its
	// Read with a timeout (os.ErrDeadlineExceeded), counted. Default 0:
	// none (the protocol sets its own deadlines).
	ReadTimeout time.Duration
	// ReadsAreActivity: bytes read count as activity (a stream of frames,
	// where no request marks a connection active); else only Active does
	// (a slowloris sends bytes without ever finishing a request).
	ReadsAreActivity bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// OnRefuse, when set, is told of every connection refused, and from
	// which source address (to log, to report on /healthz).
	OnRefuse func(r Refusal, src string)
	// OnEvict, when set, is told of every connection evicted for a
	// newcomer: full (Max were open) or not (MaxIdle were idle).
	OnEvict func(full bool)
}

func (c LimiterConfig) withDefaults() LimiterConfig {
	if c.Max < 1 {
		c.Max = 1
	}
	if c.MaxPerSource <= 0 {
		c.MaxPerSource = c.Max
	}
	if c.MaxIdle <= 0 {
		c.MaxIdle = c.Max
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// LimiterStats are a Limiter's counters.
type LimiterStats struct {
	// Open is the number of connections open now.
	Open int
	// Accepted connections; Refused (Max open, none to evict);
	// SourceRefused (MaxPerSource); Evicted (idle connections closed for
	// a newcomer when Max were open); IdleEvicted (closed for a newcomer
	// when MaxIdle were not active); TimedOut (reads past ReadTimeout).
	Accepted, Refused, SourceRefused, Evicted, IdleEvicted, TimedOut uint64
}

// Limiter is a net.Listener that bounds the connections it hands out.
// An idle connection — one that sends nothing, or never finishes a
// request or a CONNECT — is the one evicted for a newcomer, never one
// serving: a host opening idle sockets, reopened as they close, churns
// through its own slots while a real sender's connection is served. (A
// limit that only refuses, or only makes newcomers wait, leaves the real
// sender behind the attack for good.) Accept, Close, Addr and the
// Conns' methods are safe for concurrent use.
type Limiter struct {
	ln  net.Listener
	cfg LimiterConfig
	mu  sync.Mutex
	a   *admission
	// closed is set by Close: a newcomer waiting for a slot gives up.
	closed atomic.Bool
	st     struct {
		accepted, refused, sourceRefused, evicted, idleEvicted, timedOut atomic.Uint64
	}
}

// NewLimiter wraps ln.
func NewLimiter(ln net.Listener, cfg LimiterConfig) *Limiter {
	l := &Limiter{ln: ln, cfg: cfg.withDefaults()}
	l.a = newAdmission(&l.cfg)
	return l
}

// Accept returns the next connection admitted (a *Conn); those refused
// are closed and counted meanwhile.
func (l *Limiter) Accept() (net.Conn, error) {
	for {
		if l.cfg.WaitForRoom {
			l.waitForRoom()
		}
		nc, err := l.ln.Accept()
		if err != nil {
			if l.cfg.WaitForRoom {
				l.mu.Lock()
				l.a.unreserve()
				l.mu.Unlock()
			}
			return nil, err
		}
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// waitForRoom reserves a slot for the next connection, evicting the one
// quiet the longest once it has been quiet for EvictAfter, polling until
// there is one (or the listener is closed: its Accept fails).
func (l *Limiter) waitForRoom() {
	for {
		l.mu.Lock()
		victim, ok := l.a.reserve(l.cfg.Now().UnixNano())
		if !ok && l.closed.Load() {
			l.a.reserved++ // given back by Accept's failure
			ok = true
		}
		l.mu.Unlock()
		if ok {
			l.evicted(victim, true)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// evicted closes a connection evicted to make room, counted.
func (l *Limiter) evicted(victim *Conn, full bool) {
	if victim == nil {
		return
	}
	if full {
		l.st.evicted.Add(1)
	} else {
		l.st.idleEvicted.Add(1)
	}
	if l.cfg.OnEvict != nil {
		l.cfg.OnEvict(full)
	}
	victim.Conn.Close() // its reader fails and Closes it: a no-op on the slot
}

// admit takes nc in (closing a connection to make room if needed), or
// closes it, counted.
func (l *Limiter) admit(nc net.Conn) *Conn {
	c := &Conn{Conn: nc, l: l, src: SourceOf(nc.RemoteAddr())}
	now := l.cfg.Now().UnixNano()
	var (
		victim *Conn
		r      Refusal
		full   bool
	)
	l.mu.Lock()
	if l.cfg.WaitForRoom {
		victim, r = l.a.admitReserved(c, now)
	} else {
		victim, r, full = l.a.admit(c, now)
	}
	l.mu.Unlock()
	l.evicted(victim, full)
	if r == Admitted {
		l.st.accepted.Add(1)
		return c
	}
	if r == RefusedFull {
		l.st.refused.Add(1)
	} else {
		l.st.sourceRefused.Add(1)
	}
	if l.cfg.OnRefuse != nil {
		l.cfg.OnRefuse(r, c.src)
	}
	nc.Close()
	return nil
}

// Close closes the listener (not the connections it handed out).
func (l *Limiter) Close() error {
	l.closed.Store(true)
	return l.ln.Close()
}

// Addr is the listener's address.
func (l *Limiter) Addr() net.Addr { return l.ln.Addr() }

// Stats returns the counters.
func (l *Limiter) Stats() LimiterStats {
	l.mu.Lock()
	open := len(l.a.open)
	l.mu.Unlock()
	return LimiterStats{Open: open, Accepted: l.st.accepted.Load(), Refused: l.st.refused.Load(),
		SourceRefused: l.st.sourceRefused.Load(), Evicted: l.st.evicted.Load(),
		IdleEvicted: l.st.idleEvicted.Load(), TimedOut: l.st.timedOut.Load()}
}

// Conn is a connection a Limiter handed out. Close gives its slot back.
type Conn struct {
	net.Conn
	l   *Limiter
	src string
	// active, quietSince and gone are the admission's (l.mu).
	active     int
	quietSince int64
	gone       bool
	// lastRead is when Read last got bytes (ReadsAreActivity), Unix ns.
	lastRead atomic.Int64
	// deadline is the read deadline set last (the reading goroutine's).
	deadline time.Time
	close    sync.Once
}

// Source is the address it is counted under (SourceOf).
func (c *Conn) Source() string { return c.src }

// Read reads, keeping the read deadline ReadTimeout ahead (moved at most
// every ReadTimeout/8: a timer update per read costs more than the read).
func (c *Conn) Read(b []byte) (int, error) {
	cfg := &c.l.cfg
	var now time.Time
	if cfg.ReadTimeout > 0 || cfg.ReadsAreActivity {
		now = cfg.Now()
	}
	if cfg.ReadTimeout > 0 && c.deadline.Sub(now) < cfg.ReadTimeout*7/8 {
		c.deadline = now.Add(cfg.ReadTimeout)
		c.Conn.SetReadDeadline(c.deadline)
	}
	n, err := c.Conn.Read(b)
	if n > 0 && cfg.ReadsAreActivity {
		c.lastRead.Store(now.UnixNano())
	}
	if err != nil && cfg.ReadTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		c.l.st.timedOut.Add(1)
	}
	return n, err
}

// Active marks the connection busy — serving a request, a session
// connected — until done is called (at most once); it is never evicted
// meanwhile. After done it waits again, from then.
func (c *Conn) Active() (done func()) {
	l := c.l
	l.mu.Lock()
	l.a.activate(c)
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.a.deactivate(c, l.cfg.Now().UnixNano())
			l.mu.Unlock()
		})
	}
}

// Close closes the connection and gives its slot back.
func (c *Conn) Close() error {
	c.close.Do(func() {
		c.l.mu.Lock()
		c.l.a.remove(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// SourceOf is the address a connection is counted under: its IP.
func SourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
