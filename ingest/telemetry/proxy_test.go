package telemetry

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy is a TCP proxy between the agent and the broker that can cut the
// link: Cut closes every live connection and refuses new ones until Restore.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}

	// Cuts counts Cut calls; Killed counts connections closed by a cut;
	// Refused counts connections refused while cut.
	Cuts, Killed, Refused atomic.Int64
	wg                    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
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
		if p.cut {
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
			io.Copy(dst, src)
			dst.Close()
			src.Close()
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

// Restore accepts connections again.
func (p *cutProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
