package telemetry

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy is a TCP proxy between the agent and the broker that can cut the
// link: Cut closes every live connection and refuses new ones until Restore;
// Stall silently stops forwarding (a link that goes dark, no RST), so only
// keep-alives can tell; Restore then drops the dead connections.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	stalled bool
	// gate is closed while forwarding is allowed; replaced by Stall.
	gate  chan struct{}
	conns map[net.Conn]struct{}

	// Cuts counts Cut calls; Killed counts connections closed by a cut;
	// Refused counts connections refused while cut.
	Cuts, Killed, Refused atomic.Int64
	// Stalls counts Stall calls; Held counts chunks held back by a stall.
	Stalls, Held atomic.Int64
	// dropUp: bytes from the client to the target vanish (DropUp);
	// Dropped counts the chunks.
	dropUp  atomic.Bool
	Dropped atomic.Int64
	wg      sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, gate: make(chan struct{})}
	close(p.gate)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) URL() string { return "tcp://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut || p.stalled {
			p.mu.Unlock()
			p.Refused.Add(1)
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer dst.Close()
			defer src.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 && src == c && p.dropUp.Load() {
					p.Dropped.Add(1)
					n = 0
				}
				if n > 0 {
					if !p.pass(src) {
						return // a stalled connection never delivers again
					}
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// Cut closes all live connections and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.Cuts.Add(1)
	for c := range p.conns {
		c.Close()
		p.Killed.Add(1)
		delete(p.conns, c)
	}
}

// pass waits while the link is stalled; false if src was dropped meanwhile.
func (p *cutProxy) pass(src net.Conn) bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
	default:
		p.Held.Add(1) // traffic sent into the dark link
		<-gate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, live := p.conns[src]
	return live
}

// Stall stops forwarding without closing anything: bytes sent into the
// link vanish, as on a dead radio link.
func (p *cutProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	p.gate = make(chan struct{})
	p.Stalls.Add(1)
}

// DropUp makes what the client sends vanish while what the target sends
// still arrives: the agent receives messages and its acks never reach the
// broker. Restore ends it.
func (p *cutProxy) DropUp() { p.dropUp.Store(true) }

// Restore accepts and forwards again. Connections that lived through a
// stall are dropped (both ends have given up on them by then).
func (p *cutProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.dropUp.Store(false)
	if p.stalled {
		for c := range p.conns {
			c.Close()
			delete(p.conns, c)
		}
		p.stalled = false
		close(p.gate)
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.Restore()
	p.Cut()
	p.wg.Wait()
}
