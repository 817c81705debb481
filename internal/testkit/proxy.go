package testkit

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP link between a client and a target on loopback that a
// test breaks on request: Cut (every open connection closed, bytes in
// flight lost), Reset (the same with a TCP reset), SetDown (refuse new
// connections), DropUp (what the client sends vanishes, what the target
// sends still arrives). It counts what it did, so a fault test proves its
// fault happened; ProxyHooks add a test's own faults or accounting.
type Proxy struct {
	ln     net.Listener
	target string
	hooks  ProxyHooks

	down, dropUp atomic.Bool

	// accepted: connections forwarded; refused: closed while down;
	// cuts: Cut/Reset calls that broke open connections; dropped: chunks
	// DropUp swallowed; up, downBytes: bytes forwarded each way.
	accepted, refused, cuts, dropped, upBytes, downBytes atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every open connection
	closed bool                  // the test ended: no new connection
	wg     sync.WaitGroup
}

// ProxyHooks change what a Proxy forwards; nil hooks forward as is.
type ProxyHooks struct {
	// Chunk sees every chunk read from one side (up: client→target)
	// before it is written to the other; it returns what to write instead
	// and whether to cut that connection once written. It runs on the
	// connection's goroutine and may sleep (an ack held back).
	Chunk func(up bool, chunk []byte) (out []byte, cut bool)
	// Up, when set, copies client→target in place of the proxy (a test's
	// own framing, a rate cap) until either side fails; Chunk, DropUp and
	// the byte count then see only the other direction.
	Up func(dst io.Writer, src io.Reader)
}

// NewProxy starts a proxy on a free loopback port to target (host:port);
// it is closed, with every connection, when the test ends.
func NewProxy(t testing.TB, target string, hooks ProxyHooks) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, hooks: hooks, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port, for the client to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			p.refused.Add(1)
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.accepted.Add(1)
		p.wg.Go(func() { p.pipe(s, c, true) })
		p.wg.Go(func() { p.pipe(c, s, false) })
	}
}

// pipe copies src to dst (up: client→target) until either fails or a
// hook cuts, then closes both.
func (p *Proxy) pipe(dst, src net.Conn, up bool) {
	defer func() { src.Close(); dst.Close() }()
	if up && p.hooks.Up != nil {
		p.hooks.Up(dst, src)
		return
	}
	count := &p.downBytes
	if up {
		count = &p.upBytes
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && up && p.dropUp.Load() {
			p.dropped.Add(1)
			n = 0
		}
		if n > 0 {
			out, cut := buf[:n], false
			if p.hooks.Chunk != nil {
				out, cut = p.hooks.Chunk(up, out)
			}
			if _, werr := dst.Write(out); werr != nil || cut {
				return
			}
			count.Add(int64(len(out)))
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every open connection (a link cut); new ones are accepted.
func (p *Proxy) Cut() { p.cut(false) }

// Reset is Cut with a TCP reset: what is in flight is lost at once, as
// when a radio link drops, and the peers see ECONNRESET.
func (p *Proxy) Reset() { p.cut(true) }

func (p *Proxy) cut(reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) > 0 {
		p.cuts.Add(1)
	}
	for c := range p.conns {
		// Every socket first: a pipe that sees its peer closed closes
		// the other end too, and that close must be a reset as well.
		if tc, ok := c.(*net.TCPConn); ok && reset {
			tc.SetLinger(0)
		}
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// SetDown takes the link down (cutting open connections and refusing new
// ones) or up again.
func (p *Proxy) SetDown(down bool) {
	p.down.Store(down)
	if down {
		p.Cut()
	}
}

// DropUp makes what the client sends vanish (on) while what the target
// sends still arrives: acks that never reach the other side.
func (p *Proxy) DropUp(on bool) { p.dropUp.Store(on) }

// Cuts is the number of Cut, Reset or SetDown(true) calls that broke
// open connections.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Accepted is the number of connections forwarded.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused is the number of connections closed because the link was down.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Dropped is the number of client chunks DropUp swallowed.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Bytes are the bytes forwarded client→target (up) and target→client
// (down), as written after the Chunk hook.
func (p *Proxy) Bytes() (up, down int64) { return p.upBytes.Load(), p.downBytes.Load() }

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}
