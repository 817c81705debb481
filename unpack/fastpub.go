package unpack

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// fastPublisher sends derived messages as fast-ingest batches (ADR-50's
// fast batch publish, nats-server 2.14 and later, a stream with
// allow_batched). Each message is still an ordinary publish that carries
// its own Nats-Expected-Last-Sequence, so the server stores it only
// directly behind its predecessor, exactly as a plain publish. The batch
// changes only how the server answers, and what it does after a refusal:
//
//   - instead of one JSON ack per message, one flow ack every F stored
//     messages ("every message of the batch up to n is stored": the
//     gap-fail mode), F ≤ flowMax, chosen by the server;
//
//   - a refused message (an expectation that fails) or a lost one (a gap
//     in the batch sequence) ends the batch: the server stores nothing of
//     it after that point, answers the error, and commits what it stored
//     (the ack names the count);
//
//   - the batch rides in the reply subject, not in headers:
//
//     <inbox>.<batch id>.<flow>.fail.<batch seq>.<op>.$FI
//     op 0 first message, 1 next, 3 end of batch (a message that is not stored)
//
// One batch is open at a time; it ends (op 3) when the source has nothing
// more for now, when no flow ack can come without it (the window is full
// below one flow step), and the next batch starts after its commit ack.
// Message k of a batch that starts behind derived sequence base is
// stored, if at all, as base+k: the acks translate to derived sequences
// without a sequence in them.
//
// The first failure sticks: every later call returns it and failed is
// closed. add, idle and close are for one goroutine; error is safe for
// concurrent use.
type fastPublisher struct {
	nc    *nats.Conn
	inbox string
	sub   *nats.Subscription
	// window and maxBytes bound what is sent and not yet acked.
	window   uint64
	maxBytes int64
	timeout  time.Duration
	onAck    func(seq uint64)
	// failed is closed at the first failure; progress is signalled
	// (without blocking) at each ack.
	failed   chan struct{}
	progress chan struct{}
	stopWD   chan struct{}
	wdDone   chan struct{}

	mu sync.Mutex
	// Guarded by mu:
	err error
	// next is the derived sequence the next message expects before it
	// (its predecessor's).
	next uint64
	// subject is the batch's last subject (the end-of-batch message's).
	subject string
	// prefix is the open batch's reply prefix, up to the batch sequence.
	prefix string
	// sizes holds the bytes of the messages in flight, by derived
	// sequence modulo its length (window+1 slots).
	sizes []int64
	// id is the open (or committing) batch, base the derived sequence
	// before its first message, n its messages sent, committing is set
	// once its end is sent, done once its commit ack came.
	id         string
	base, n    uint64
	committing bool
	done       bool
	// acked is the highest derived sequence acked; inFlight the bytes
	// sent above it; lastAck when acked last moved (or when the first
	// message after it, or a batch's end, went out).
	acked    uint64
	inFlight int64
	lastAck  time.Time
	// flowSeq is the batch sequence of the open batch's last flow ack;
	// flow the ack interval it asked for.
	flowSeq uint64
	flow    uint64
	// avgSize is a moving average of the message sizes.
	avgSize int64
}

// flowMax is the most messages per flow ack the server grants a batch.
const flowMax = 500

func newFastPublisher(nc *nats.Conn, last uint64, window int, maxBytes int64, timeout time.Duration, onAck func(uint64)) (*fastPublisher, error) {
	p := &fastPublisher{nc: nc, inbox: nc.NewInbox(), window: uint64(window), maxBytes: maxBytes,
		timeout: timeout, onAck: onAck, failed: make(chan struct{}), progress: make(chan struct{}, 1),
		stopWD: make(chan struct{}), wdDone: make(chan struct{}), next: last, sizes: make([]int64, window+1),
		acked: last, done: true}
	sub, err := nc.Subscribe(p.inbox+".>", p.answer)
	if err != nil {
		return nil, fmt.Errorf("unpack: subscribe to the publish answers: %w", err)
	}
	// Answers are few (one per flow step); never drop one.
	sub.SetPendingLimits(-1, -1)
	p.sub = sub
	go p.watchdog()
	return p, nil
}

// fail records the first failure. Lock should be held.
func (p *fastPublisher) failLocked(err error) {
	if p.err == nil {
		p.err = err
		close(p.failed)
	}
}

func (p *fastPublisher) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failLocked(err)
}

func (p *fastPublisher) failedC() <-chan struct{} { return p.failed }

// reserve: the fence.
func (p *fastPublisher) reserve() int64 { return fenceReserve }

// flush does nothing: add sends each message at once.
func (p *fastPublisher) flush(context.Context) error { return p.error() }

func (p *fastPublisher) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// add sends m behind the previous message, waiting while the window is
// full.
func (p *fastPublisher) add(ctx context.Context, m *nats.Msg) error {
	size := msgSize(m) + fenceReserve
	if err := p.wait(ctx, func() bool {
		return p.next-p.acked < p.window && (p.inFlight == 0 || p.inFlight+size <= p.maxBytes) && (p.done || !p.committing)
	}); err != nil {
		return err
	}
	p.mu.Lock()
	if p.done {
		// Start a batch behind what is acked, asking for an ack every
		// quarter of the window (in messages of the average size).
		p.id, p.base, p.n, p.committing, p.done, p.flowSeq = nuid.Next(), p.next, 0, false, false, 0
		p.flow = uint64(max(1, min(flowMax, int64(p.window)/4, p.maxBytes/(4*max(p.avgSize, size, 1)))))
		p.prefix = p.inbox + "." + p.id + "." + strconv.FormatUint(p.flow, 10) + ".fail."
	}
	p.n++
	op := ".1.$FI"
	if p.n == 1 {
		op = ".0.$FI"
	}
	if p.next == p.acked {
		p.lastAck = time.Now()
	}
	putHeader(m.Header, jetstream.ExpectedLastSeqHeader, strconv.FormatUint(p.next, 10))
	p.next++
	p.sizes[p.next%uint64(len(p.sizes))] = size
	p.inFlight += size
	p.avgSize += (size - p.avgSize) / 16
	m.Reply = p.prefix + strconv.FormatUint(p.n, 10) + op
	p.subject = m.Subject
	p.mu.Unlock()
	if err := p.nc.PublishMsg(m); err != nil {
		p.fail(fmt.Errorf("unpack: publish: %w", err))
		return p.error()
	}
	return nil
}

// wait waits until ready (called with mu held) holds, ending the batch
// first when no flow ack can come without it.
func (p *fastPublisher) wait(ctx context.Context, ready func() bool) error {
	for {
		p.mu.Lock()
		if p.err != nil {
			p.mu.Unlock()
			return p.err
		}
		if ready() {
			p.mu.Unlock()
			return nil
		}
		// A flow ack comes only after flow more messages of the open
		// batch are stored; below that, only its end brings one.
		end := !p.done && !p.committing && p.n-p.flowSeq < p.flow
		p.mu.Unlock()
		if end {
			if err := p.end(); err != nil {
				return err
			}
		}
		select {
		case <-p.progress:
		case <-p.failed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// idle ends the open batch: the source has nothing more for now, and its
// end makes the server ack the rest.
func (p *fastPublisher) idle() error {
	p.mu.Lock()
	open := !p.done && !p.committing && p.err == nil
	p.mu.Unlock()
	if !open {
		return p.error()
	}
	return p.end()
}

// end sends the open batch's end (op 3, not stored).
func (p *fastPublisher) end() error {
	p.mu.Lock()
	p.committing = true
	p.lastAck = time.Now() // the end's ack is due from now
	m := &nats.Msg{Subject: p.subject, Reply: p.prefix + strconv.FormatUint(p.n+1, 10) + ".3.$FI"}
	p.mu.Unlock()
	if err := p.nc.PublishMsg(m); err != nil {
		p.fail(fmt.Errorf("unpack: publish: %w", err))
	}
	return p.error()
}

// batchAnswer is any answer to a fast batch message: a flow ack
// ("type":"ack"), a gap or an error report, or the batch's final ack (a
// publish ack with the batch and its count, or an error).
type batchAnswer struct {
	Type     string              `json:"type"`
	Seq      uint64              `json:"seq"`
	Stream   string              `json:"stream"`
	Batch    string              `json:"batch"`
	Count    uint64              `json:"count"`
	LastSeq  uint64              `json:"last_seq"`
	Messages int                 `json:"msgs"`
	Error    *jetstream.APIError `json:"error"`
}

// answer takes one server answer (on the subscription's goroutine).
func (p *fastPublisher) answer(m *nats.Msg) {
	id, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, p.inbox+"."), ".")
	var a batchAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		p.fail(fmt.Errorf("unpack: a publish answer does not decode: %w: %q", err, m.Data))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	if id != p.id {
		// An answer to a batch already over (cannot happen: one batch at
		// a time, each over at its final ack).
		p.failLocked(fmt.Errorf("unpack: an answer for batch %q while %q is open: %s", id, p.id, m.Data))
		return
	}
	switch {
	case a.Error != nil:
		p.failLocked(publishError(a.Error, p.base+max(a.Seq, 1)))
	case a.Type == "ack":
		if a.Seq > p.n {
			p.failLocked(fmt.Errorf("unpack: flow ack of batch sequence %d, %d sent", a.Seq, p.n))
			return
		}
		p.flowSeq = max(p.flowSeq, a.Seq)
		p.ackedLocked(p.base + a.Seq)
	case a.Type == "gap":
		p.failLocked(fmt.Errorf("unpack: the server lost batch messages %d..%d (derived from %d)", a.LastSeq, a.Seq-1, p.base+a.LastSeq))
	case a.Type != "":
		p.failLocked(fmt.Errorf("unpack: unknown publish answer %q", m.Data))
	default:
		// The final ack: everything up to count is stored, as base+count.
		if a.Batch != p.id || a.Count != p.n || a.Seq != p.base+a.Count || !p.committing {
			p.failLocked(fmt.Errorf("unpack: batch %s of %d ended at %d messages, sequence %d (expected %d)", p.id, p.n, a.Count, a.Seq, p.base+p.n))
			return
		}
		p.done = true
		p.ackedLocked(a.Seq)
	}
}

// publishError is the error of a refused derived message: ErrFenced when
// its expectation failed (another instance wrote, or an earlier message
// was lost).
func publishError(e *jetstream.APIError, seq uint64) error {
	switch e.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return fmt.Errorf("%w: derived sequence %d: %v", ErrFenced, seq, e)
	case errCodeBatchTooLarge:
		return fmt.Errorf("%w: %v", errBatchTooLarge, e)
	}
	return fmt.Errorf("unpack: publish of derived sequence %d: %w", seq, e)
}

// ackedLocked moves the acked sequence to seq. Lock should be held.
func (p *fastPublisher) ackedLocked(seq uint64) {
	if seq <= p.acked {
		if p.done {
			p.signal()
		}
		return
	}
	for s := p.acked + 1; s <= seq; s++ {
		p.inFlight -= p.sizes[s%uint64(len(p.sizes))]
	}
	p.acked = seq
	p.lastAck = time.Now()
	if p.onAck != nil {
		p.onAck(seq)
	}
	p.signal()
}

func (p *fastPublisher) signal() {
	select {
	case p.progress <- struct{}{}:
	default:
	}
}

// watchdog fails the publisher when something is in flight and no ack
// came for the ack timeout.
func (p *fastPublisher) watchdog() {
	defer close(p.wdDone)
	t := time.NewTicker(max(p.timeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stopWD:
			return
		case <-t.C:
		}
		p.mu.Lock()
		waiting := p.acked < p.next || (p.committing && !p.done)
		if waiting && time.Since(p.lastAck) > p.timeout {
			p.failLocked(fmt.Errorf("unpack: no publish ack for %s (acked %d)", p.timeout, p.acked))
		}
		p.mu.Unlock()
	}
}

// close stops taking answers and returns the first failure; what is in
// flight is not waited for (the next session reads the cursor).
func (p *fastPublisher) close() error {
	close(p.stopWD)
	<-p.wdDone
	p.sub.Unsubscribe()
	return p.error()
}
