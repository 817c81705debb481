package unpack

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// sender sends derived messages in order behind the cursor; the first
// failure sticks (every later call returns it, failedC is closed). add,
// flush, idle and close are for one goroutine; error and failedC are
// safe for concurrent use.
type sender interface {
	// add sends m (or queues it into a batch) behind the previous one.
	add(ctx context.Context, m *nats.Msg) error
	// flush sends what add queued: a source message is done.
	flush(ctx context.Context) error
	// idle says the source has nothing more for now.
	idle() error
	// reserve is the most bytes of headers the sender adds to a message
	// (see limit).
	reserve() int64
	error() error
	failedC() <-chan struct{}
	// close stops the sender and returns the first failure.
	close() error
}

// publisher sends derived messages in order as atomic batches (one
// server round per batch, not per message), or one by one with an ack
// each (a batch of one), each batch expecting the derived stream's last
// sequence to be its predecessor's, with up to max batches in flight; a
// goroutine takes the acks in order. The first
// failure sticks: every later publish returns it, and failed is closed.
// add, send and close are for one goroutine; error is safe for
// concurrent use.
type publisher struct {
	js jetstream.JetStream
	nc *nats.Conn
	// last is the sequence the next batch's predecessor will have.
	last uint64
	// batch is the batch being built; size its bound.
	batch []*nats.Msg
	size  int
	// slots holds one token per batch in flight.
	slots chan struct{}
	acks  chan pending
	onAck func(seq uint64)
	done  chan struct{}
	// failed is closed at the first failure.
	failed chan struct{}

	mu  sync.Mutex
	err error // guarded by mu
}

// pending is a publish awaiting its ack and the sequence it must get.
type pending struct {
	f    jetstream.PubAckFuture
	want uint64
}

func newPublisher(nc *nats.Conn, js jetstream.JetStream, last uint64, size, max int, onAck func(uint64)) *publisher {
	p := &publisher{nc: nc, js: js, last: last, size: size, slots: make(chan struct{}, max), acks: make(chan pending, max),
		onAck: onAck, done: make(chan struct{}), failed: make(chan struct{})}
	go p.takeAcks()
	return p
}

// fail records the first failure.
func (p *publisher) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		close(p.failed)
	}
}

func (p *publisher) failedC() <-chan struct{} { return p.failed }

// idle does nothing: every batch is sent at flush.
func (p *publisher) idle() error { return p.error() }

func (p *publisher) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// add queues m behind the previous message; a full batch is sent.
func (p *publisher) add(ctx context.Context, m *nats.Msg) error {
	if err := p.error(); err != nil {
		return err
	}
	p.batch = append(p.batch, m)
	if len(p.batch) >= p.size {
		return p.flush(ctx)
	}
	return nil
}

// flush sends the queued messages as one atomic batch: the first expects
// the last sequence, the last commits (and alone is acked). A batch of
// one is a plain publish with the expectation.
func (p *publisher) flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return p.error()
	}
	if err := p.error(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-p.failed:
		return p.error()
	case <-ctx.Done():
		return ctx.Err()
	}
	b := p.batch
	p.batch = p.batch[:0]
	n := len(b)
	if n == 1 {
		b[0].Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(p.last, 10)}
	} else {
		id := nuid.Next()
		for i, m := range b {
			m.Header[hdrBatchID] = []string{id}
			m.Header[hdrBatchSeq] = []string{strconv.Itoa(i + 1)}
		}
		b[0].Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(p.last, 10)}
		b[n-1].Header[hdrBatchCommit] = []string{"1"}
		for _, m := range b[:n-1] {
			if err := p.nc.PublishMsg(m); err != nil {
				<-p.slots
				p.fail(fmt.Errorf("unpack: publish: %w", err))
				return p.error()
			}
		}
	}
	f, err := p.js.PublishMsgAsync(b[n-1])
	if err != nil {
		<-p.slots
		p.fail(fmt.Errorf("unpack: publish: %w", err))
		return p.error()
	}
	p.last += uint64(n)
	p.acks <- pending{f: f, want: p.last}
	return nil
}

// fenceReserve is the fence header at its longest: every sender puts it
// on the messages that carry an expectation.
var fenceReserve = headerLine(jetstream.ExpectedLastSeqHeader, len("18446744073709551615"))

// reserve: the fence, and in a batch of more than one the batch headers
// (a nuid id, a sequence up to the batch size, the commit flag).
func (p *publisher) reserve() int64 {
	if p.size == 1 {
		return fenceReserve
	}
	return fenceReserve + headerLine(hdrBatchID, nuidLen) + headerLine(hdrBatchSeq, len(strconv.Itoa(p.size))) + headerLine(hdrBatchCommit, 1)
}

// nuidLen is the length of a nuid (a batch id).
const nuidLen = 22

// Atomic batch headers (ADR-50).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// errCodeBatchTooLarge is the server's "atomic publish batch is too
// large".
const errCodeBatchTooLarge = 10199

// takeAcks waits for each ack in order until close.
func (p *publisher) takeAcks() {
	defer close(p.done)
	for a := range p.acks {
		select {
		case ack := <-a.f.Ok():
			if ack.Sequence != a.want {
				// Cannot happen behind the expectation unless something
				// else writes the derived stream.
				p.fail(fmt.Errorf("%w: acked as sequence %d, expected %d", ErrFenced, ack.Sequence, a.want))
			} else if p.error() == nil && p.onAck != nil {
				p.onAck(ack.Sequence)
			}
		case err := <-a.f.Err():
			var apiErr *jetstream.APIError
			switch {
			case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
				p.fail(fmt.Errorf("%w: derived sequence %d: %v", ErrFenced, a.want, err))
			case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeBatchTooLarge:
				p.fail(fmt.Errorf("%w: %v", errBatchTooLarge, err))
			default:
				p.fail(fmt.Errorf("unpack: publish of derived sequence %d: %w", a.want, err))
			}
		}
		<-p.slots
	}
}

// close waits for every ack in flight (what is queued is not sent) and
// returns the first failure.
func (p *publisher) close() error {
	close(p.acks)
	<-p.done
	return p.error()
}
