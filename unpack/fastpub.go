package unpack

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// fastPublisher sends derived messages as fast-ingest batches (ADR-50's
// fast batch publish, nats-server 2.14 and later, a stream with
// allow_batched) through jetstreamext's FastPublisher. Each message is
// still an ordinary publish that carries its own
// Nats-Expected-Last-Sequence, so the server stores it only directly
// behind its predecessor, exactly as a plain publish. The batch changes
// only how the server answers, and what it does after a refusal:
//
//   - instead of one JSON ack per message, one flow ack every few hundred
//     stored messages ("every message of the batch up to n is stored":
//     the gap-fail mode);
//
//   - a refused message (an expectation that fails) or a lost one ends
//     the batch: the server stores nothing of it after that point and
//     answers the error, which jetstreamext hands to the error handler as
//     the server's APIError (a failed expectation becomes ErrFenced).
//
// A batch ends (idle) when the source has nothing more for now; the next
// starts with a new jetstreamext publisher behind its commit ack. Message
// k of a batch that starts behind derived sequence base is stored, if at
// all, as base+k: the acks translate to derived sequences.
//
// What jetstreamext v0.3.2 does not do, and this sender therefore adds:
// a bound in bytes (it bounds messages only: the flow is chosen per
// batch so that flow × outstanding acks × the average size stays within
// maxBytes). A refusal that comes while a publish waits for a flow ack
// does not wake that publish: it returns after jetstreamext's ack
// timeout (Options.AckTimeout), with the refusal, and the session ends.
//
// The first failure sticks: every later call returns it and failed is
// closed. add, idle and close are for one goroutine; error and failedC
// are safe for concurrent use.
type fastPublisher struct {
	js       jetstream.JetStream
	window   int
	maxBytes int64
	timeout  time.Duration
	onAck    func(seq uint64)
	failed   chan struct{}

	// fp is the open batch (nil: none); base the derived sequence before
	// its first message, next the sequence the next message expects
	// before it, acked the highest derived sequence acked.
	fp               jetstreamext.FastPublisher
	base, next       uint64
	acked            uint64
	avgSize, batched int64

	mu  sync.Mutex
	err error // guarded by mu
}

// flowMax is the most messages per flow ack asked of the server;
// outstandingAcks the flow acks a batch may wait for at once.
const (
	flowMax         = 500
	outstandingAcks = 4
)

// sizeSample is how often (in messages) add samples a message's size
// for the average that sizes the next batch's flow: a size costs a walk
// of the header map.
const sizeSample = 32

func newFastPublisher(js jetstream.JetStream, last uint64, window int, maxBytes int64, timeout time.Duration, onAck func(uint64)) (*fastPublisher, error) {
	return &fastPublisher{js: js, window: window, maxBytes: maxBytes, timeout: timeout, onAck: onAck,
		failed: make(chan struct{}), next: last, acked: last}, nil
}

func (p *fastPublisher) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		close(p.failed)
	}
}

func (p *fastPublisher) failedC() <-chan struct{} { return p.failed }

func (p *fastPublisher) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// reserve: the fence.
func (p *fastPublisher) reserve() int64 { return fenceReserve }

// flush does nothing: add sends each message at once.
func (p *fastPublisher) flush(context.Context) error { return p.error() }

// add sends m behind the previous message; jetstreamext waits while
// flow acks are outstanding.
func (p *fastPublisher) add(ctx context.Context, m *nats.Msg) error {
	if err := p.error(); err != nil {
		return err
	}
	var size int64
	if p.fp == nil || p.next%sizeSample == 0 {
		size = msgSize(m) + fenceReserve
		if p.avgSize == 0 {
			p.avgSize = size
		}
		p.avgSize += (size - p.avgSize) / 16
	}
	if p.fp == nil {
		// Ask for a flow ack every quarter of what may be in flight, in
		// messages of the average size.
		flow := max(1, min(flowMax, int64(p.window)/outstandingAcks, p.maxBytes/(outstandingAcks*max(p.avgSize, size, 1))))
		fp, err := jetstreamext.NewFastPublisher(p.js,
			jetstreamext.FastPublishFlowControl{Flow: uint16(flow), MaxOutstandingAcks: outstandingAcks, AckTimeout: p.timeout},
			jetstreamext.WithFastPublisherErrorHandler(p.answerError))
		if err != nil {
			p.fail(fmt.Errorf("unpack: fast publisher: %w", err))
			return p.error()
		}
		p.fp, p.base, p.batched = fp, p.next, 0
	}
	// The fence, set here rather than with jetstreamext's
	// WithBatchExpectLastSequence: the same header, without an option
	// closure, its pointer and a header canonicalization per message.
	m.Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(p.next, 10)}
	ack, err := p.fp.AddMsg(m)
	if perr := p.error(); perr != nil {
		return perr // the server's refusal, not jetstreamext's closed batch
	}
	if err != nil {
		p.fail(fmt.Errorf("unpack: publish of derived sequence %d: %w", p.next+1, err))
		return p.error()
	}
	p.next++
	p.batched++
	p.ackedTo(p.base + ack.AckSequence)
	return nil
}

// idle ends the open batch: the source has nothing more for now, and its
// end makes the server ack the rest.
func (p *fastPublisher) idle() error {
	if p.fp == nil || p.error() != nil {
		return p.error()
	}
	fp := p.fp
	p.fp = nil
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	ack, err := fp.Close(ctx)
	if perr := p.error(); perr != nil {
		return perr
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		p.fail(publishError(apiErr, p.next))
	case err != nil:
		p.fail(fmt.Errorf("unpack: end of batch at derived sequence %d: %w", p.next, err))
	case ack.Sequence != p.next || ack.BatchSize != uint64(p.batched):
		p.fail(fmt.Errorf("unpack: batch of %d ended at %d messages, sequence %d (expected %d)", p.batched, ack.BatchSize, ack.Sequence, p.next))
	default:
		p.ackedTo(ack.Sequence)
	}
	return p.error()
}

// answerError takes an error the server sent for the open batch (called
// by jetstreamext with its lock held: it only records).
func (p *fastPublisher) answerError(err error) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		p.fail(publishError(apiErr, 0))
		return
	}
	p.fail(fmt.Errorf("unpack: fast batch: %w", err))
}

// publishError is the error of a refused derived message: ErrFenced when
// its expectation failed (another instance wrote, or an earlier message
// was lost).
func publishError(e *jetstream.APIError, seq uint64) error {
	switch e.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return fmt.Errorf("%w: %v", ErrFenced, e)
	case errCodeBatchTooLarge:
		return fmt.Errorf("%w: %v", errBatchTooLarge, e)
	}
	return fmt.Errorf("unpack: publish near derived sequence %d: %w", seq, e)
}

// ackedTo moves the acked sequence to seq.
func (p *fastPublisher) ackedTo(seq uint64) {
	if seq <= p.acked {
		return
	}
	p.acked = seq
	if p.onAck != nil {
		p.onAck(seq)
	}
}

// close returns the first failure; what is in flight is not waited for
// (the next session reads the cursor), and an open batch is left to the
// server's batch timeout.
func (p *fastPublisher) close() error { return p.error() }
