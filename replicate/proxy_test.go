package replicate

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy is a TCP proxy between the agent and the central server that
// injects link faults on request. It understands just enough of the NATS
// protocol to find batch messages and commit acks in the byte stream, and
// counts every fault it actually caused, so tests can prove them.
type faultProxy struct {
	ln     net.Listener
	target string

	// Armed faults (each fires once, then disarms).
	cutMidBatch     atomic.Bool  // client→server: forward a chunk holding a non-commit batch message (layout 1) or half of one holding a layout-2 commit message, then cut
	dropAfterCommit atomic.Bool  // server→client: swallow a chunk holding a commit ack, then cut
	ackDelay        atomic.Int64 // server→client: delay chunks holding commit acks by this many ns (sticky)
	down            atomic.Bool  // link down: refuse new connections

	// Proof counters.
	midBatchCuts, droppedAcks, delayedAcks, cuts, accepted atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

var (
	patBatchSeq    = []byte("Nats-Batch-Sequence")
	patBatchCommit = []byte("Nats-Batch-Commit")
	patExpectLast  = []byte("Nats-Expected-Last-Subject-Sequence")
	patPackCommit  = []byte(".cut ")
	// patCommitAck starts every publish ack of an EDGE_ stream (a batch
	// commit's and a layout-2 commit message's).
	patCommitAck = []byte(`{"stream":"EDGE_`)
)

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, true)
		go p.pipe(s, c, false)
	}
}

// pipe copies src to dst, injecting the armed faults.
func (p *faultProxy) pipe(src, dst net.Conn, clientToServer bool) {
	defer p.wg.Done()
	defer func() { src.Close(); dst.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if clientToServer {
				if bytes.Contains(chunk, patBatchSeq) && !bytes.Contains(chunk, patBatchCommit) && p.cutMidBatch.CompareAndSwap(true, false) {
					dst.Write(chunk)
					p.midBatchCuts.Add(1)
					p.cuts.Add(1)
					return
				}
				if i := bytes.Index(chunk, patPackCommit); i >= 0 && bytes.Contains(chunk, patExpectLast) && !bytes.Contains(chunk, patBatchSeq) &&
					p.cutMidBatch.CompareAndSwap(true, false) {
					dst.Write(chunk[:i+(len(chunk)-i)/2])
					p.midBatchCuts.Add(1)
					p.cuts.Add(1)
					return
				}
			} else if bytes.Contains(chunk, patCommitAck) {
				if p.dropAfterCommit.CompareAndSwap(true, false) {
					p.droppedAcks.Add(1)
					p.cuts.Add(1)
					return
				}
				if d := p.ackDelay.Load(); d > 0 {
					p.delayedAcks.Add(1)
					time.Sleep(time.Duration(d)) // the injected delay
				}
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// cutAll closes every open connection (a link cut).
func (p *faultProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	if len(p.conns) > 0 {
		p.cuts.Add(1)
	}
	p.conns = map[net.Conn]struct{}{}
}

// setDown takes the link down (cutting open connections) or up.
func (p *faultProxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.cutAll()
	}
}

func (p *faultProxy) close() {
	p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}
