package replicate

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// faultProxy is a testkit.Proxy between the agent and the central server
// whose Chunk hook injects NATS-aware link faults on request. It
// understands just enough of the NATS protocol to find batch messages and
// commit acks in the byte stream, and counts every fault it actually
// caused, so tests can prove them. Link cuts and downs are the Proxy's
// (Cut, SetDown, Cuts).
type faultProxy struct {
	*testkit.Proxy

	// Armed faults (each fires once, then disarms).
	cutMidBatch     atomic.Bool  // client→server: forward a chunk holding a non-commit batch message (layout 1) or half of one holding a layout-2 commit message, then cut
	dropAfterCommit atomic.Bool  // server→client: swallow a chunk holding a commit ack, then cut
	ackDelay        atomic.Int64 // server→client: delay chunks holding commit acks by this many ns (sticky)

	// Proof counters.
	midBatchCuts, droppedAcks, delayedAcks atomic.Int64
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
	p := &faultProxy{}
	p.Proxy = testkit.NewProxy(t, target, testkit.ProxyHooks{Chunk: p.chunk})
	return p
}

func (p *faultProxy) URL() string { return "nats://" + p.Addr() }

// chunk injects the armed faults into one chunk (up: client→server).
func (p *faultProxy) chunk(up bool, chunk []byte) ([]byte, bool) {
	if up {
		if bytes.Contains(chunk, patBatchSeq) && !bytes.Contains(chunk, patBatchCommit) && p.cutMidBatch.CompareAndSwap(true, false) {
			p.midBatchCuts.Add(1)
			return chunk, true
		}
		if i := bytes.Index(chunk, patPackCommit); i >= 0 && bytes.Contains(chunk, patExpectLast) && !bytes.Contains(chunk, patBatchSeq) &&
			p.cutMidBatch.CompareAndSwap(true, false) {
			p.midBatchCuts.Add(1)
			return chunk[:i+(len(chunk)-i)/2], true
		}
	} else if bytes.Contains(chunk, patCommitAck) {
		if p.dropAfterCommit.CompareAndSwap(true, false) {
			p.droppedAcks.Add(1)
			return nil, true
		}
		if d := p.ackDelay.Load(); d > 0 {
			p.delayedAcks.Add(1)
			time.Sleep(time.Duration(d)) // the injected delay
		}
	}
	return chunk, false
}
