package unpack

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// linkProxy is a TCP proxy between an agent and one central node whose
// connections a test cuts (a link cut); cuts counts the cuts that broke
// open connections.
type linkProxy struct {
	ln     net.Listener
	target string
	cuts   atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newLinkProxy(t testing.TB, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *linkProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		p.wg.Go(func() { pipe(c, s) })
		p.wg.Go(func() { pipe(s, c) })
	}
}

// cut closes every open connection.
func (p *linkProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) > 0 {
		p.cuts.Add(1)
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

func (p *linkProxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}
