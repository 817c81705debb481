package unpack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publisher sends derived messages in order behind the cursor: the one
// way they are sent. Each is a plain publish that carries
// Nats-Expected-Last-Sequence (the fence: the server stores it only
// directly behind its predecessor), and only one in every few hundred
// asks for the server's ack:
//
//	msg k+1 .. k+n-1   no reply      the server stores it, answers nothing
//	msg k+n            reply inbox   the ack: {"stream":…,"seq":k+n}
//
// An ack of sequence s says that every message up to s is stored (the
// stream stores one connection's messages in order, and each behind its
// predecessor); an error (the fence failed: another instance wrote, or
// an earlier message was lost and every later one failed its
// expectation) ends the session, which resumes from the cursor. The
// last message before the source goes idle is held back and sent asking
// for an ack (idle), so that the derived stream's progress is always
// acked.
//
// Why not jetstreamext's FastPublisher (ADR-50 fast batches): it sends
// the same plain publishes with a reply each, and the server's fast-batch
// path checks every message's headers twice and tracks the batch — about
// half as much again server CPU per stored message as this plain publish,
// which kept the unpacker at 0.4–0.8× the server's own storing rate
// (BenchmarkUnpackVsReplication, docs/benchmarks/unpack.md).
//
// Flow control: at most window/every − 1 acks are awaited at once, each
// asked after at most a fifth of Options.MaxPending messages (at most
// 500) or of MaxPendingBytes, so what is in flight stays within both —
// far below the server's ingest queue of a stream (100,000 messages,
// 128 MiB by default), which drops what exceeds it.
//
// The first failure sticks: every later call returns it and failedC is
// closed. add, idle and close are for one goroutine; error and failedC
// are safe for concurrent use.
type publisher struct {
	nc *nats.Conn
	// inbox receives the acks (one subscription a session).
	inbox string
	sub   *nats.Subscription
	// every and everyBytes: a message asks for an ack once this many
	// messages or bytes were sent since the last that asked.
	every      int
	everyBytes int64
	// acks is the most acks awaited at once.
	acks    int
	timeout time.Duration
	onAck   func(seq uint64)

	// next is the sequence the next message expects before it; held the
	// message sent last by add, not yet published (nil: none);
	// sent and sentBytes what was sent since the last ack asked.
	next      uint64
	held      *nats.Msg
	sent      int
	sentBytes int64

	// slots holds one token per ack awaited; asked the sequence each
	// must name, in order; replies the acks.
	slots   chan struct{}
	asked   chan uint64
	replies chan *nats.Msg
	done    chan struct{}
	failed  chan struct{}

	mu  sync.Mutex
	err error // guarded by mu
}

// maxEvery is the most messages per ack.
const maxEvery = 500

// headerAllowance stands in for a message's headers in the bytes in
// flight (a derived message's headers are a few hundred bytes).
const headerAllowance = 1 << 10

// newPublisher returns the sender of derived messages behind sequence
// last on nc: up to window messages and maxBytes in flight, each ack
// awaited at most timeout; onAck (from another goroutine) gets each
// acked sequence.
func newPublisher(nc *nats.Conn, last uint64, window int, maxBytes int64, timeout time.Duration, onAck func(uint64)) (*publisher, error) {
	every := max(1, min(maxEvery, window/5))
	acks := max(1, window/every-1)
	p := &publisher{nc: nc, inbox: nc.NewInbox(), every: every, everyBytes: max(1, maxBytes/int64(acks+1)),
		timeout: timeout, onAck: onAck, next: last, acks: acks,
		slots: make(chan struct{}, acks), asked: make(chan uint64, acks),
		replies: make(chan *nats.Msg, acks+1), done: make(chan struct{}), failed: make(chan struct{})}
	sub, err := nc.ChanSubscribe(p.inbox, p.replies)
	if err != nil {
		return nil, fmt.Errorf("unpack: subscribe to acks: %w", err)
	}
	p.sub = sub
	go p.takeAcks()
	return p, nil
}

func (p *publisher) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		close(p.failed)
	}
}

func (p *publisher) failedC() <-chan struct{} { return p.failed }

func (p *publisher) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// fenceReserve is the fence header at its longest: the bytes the
// publisher adds to every message (see limit).
var fenceReserve = headerLine(jetstream.ExpectedLastSeqHeader, len("18446744073709551615"))

// add sends m behind the previous message: it publishes the message held
// back by the previous add and holds m (so m must stay unchanged until
// the next add or idle; builder alternates two messages for that).
func (p *publisher) add(ctx context.Context, m *nats.Msg) error {
	if err := p.error(); err != nil {
		return err
	}
	putHeader(m.Header, jetstream.ExpectedLastSeqHeader, strconv.FormatUint(p.next, 10))
	p.next++
	if p.held != nil {
		if err := p.send(ctx, p.held, 0); err != nil {
			return err
		}
	}
	p.held = m
	if p.sent+1 >= p.every || p.sentBytes+int64(len(m.Data))+headerAllowance >= p.everyBytes {
		return p.sendHeld(ctx)
	}
	return nil
}

// idle publishes the held message asking for an ack: the source has
// nothing more for now.
func (p *publisher) idle(ctx context.Context) error {
	if err := p.error(); err != nil || p.held == nil {
		return err
	}
	return p.sendHeld(ctx)
}

// drain publishes the held message asking for an ack and waits for
// every ack asked: before the session stops where it cannot go on (a
// source message that does not decode), so that what came before it is
// in the derived stream.
func (p *publisher) drain(ctx context.Context) error {
	if err := p.idle(ctx); err != nil {
		return err
	}
	for range p.acks {
		if err := p.takeSlot(ctx); err != nil {
			return err
		}
	}
	for range p.acks {
		<-p.slots
	}
	return p.error()
}

// takeSlot takes one of the slots of the acks awaited, waiting while
// all are taken; it fails once the publisher has failed.
func (p *publisher) takeSlot(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-p.failed:
		return p.error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendHeld publishes the held message, the last added (sequence next),
// asking for an ack.
func (p *publisher) sendHeld(ctx context.Context) error {
	m := p.held
	p.held = nil
	return p.send(ctx, m, p.next)
}

// send publishes m; with ack > 0, asking for the server's ack, which
// must name sequence ack (waiting while p.acks are awaited).
func (p *publisher) send(ctx context.Context, m *nats.Msg, ack uint64) error {
	if ack == 0 {
		if err := p.nc.PublishMsg(m); err != nil {
			p.fail(fmt.Errorf("unpack: publish: %w", err))
			return p.error()
		}
		p.sent++
		p.sentBytes += int64(len(m.Data)) + headerAllowance
		return nil
	}
	if err := p.takeSlot(ctx); err != nil {
		return err
	}
	m.Reply = p.inbox
	err := p.nc.PublishMsg(m)
	m.Reply = ""
	if err != nil {
		<-p.slots
		p.fail(fmt.Errorf("unpack: publish: %w", err))
		return p.error()
	}
	p.asked <- ack
	p.sent, p.sentBytes = 0, 0
	return nil
}

// pubAck is the server's answer to a publish that asked for one.
type pubAck struct {
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Error  *jetstream.APIError `json:"error"`
}

// takeAcks waits for each ack asked, in order, until close.
func (p *publisher) takeAcks() {
	defer close(p.done)
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	for want := range p.asked {
		timer.Reset(p.timeout)
		select {
		case r := <-p.replies:
			if err := p.check(r, want); err != nil {
				p.fail(err)
			} else if p.error() == nil && p.onAck != nil {
				p.onAck(want)
			}
		case <-timer.C:
			p.fail(fmt.Errorf("unpack: no ack of derived sequence %d within %s", want, p.timeout))
		case <-p.failed:
		}
		<-p.slots
	}
}

// check reads the ack of derived sequence want.
func (p *publisher) check(r *nats.Msg, want uint64) error {
	if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
		return fmt.Errorf("unpack: publish of derived sequence %d: %w", want, nats.ErrNoResponders)
	}
	var a pubAck
	if err := json.Unmarshal(r.Data, &a); err != nil {
		return fmt.Errorf("unpack: ack of derived sequence %d: %w: %q", want, err, r.Data)
	}
	switch {
	case a.Error != nil:
		return publishError(a.Error, want)
	case a.Seq != want:
		// Cannot happen behind the expectation unless something else
		// writes the derived stream.
		return fmt.Errorf("%w: acked as sequence %d, expected %d", ErrFenced, a.Seq, want)
	}
	return nil
}

// publishError is the error of a refused derived message: ErrFenced when
// its expectation failed (another instance wrote, or an earlier message
// was lost).
func publishError(e *jetstream.APIError, seq uint64) error {
	switch e.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return fmt.Errorf("%w: derived sequence %d: %v", ErrFenced, seq, e)
	}
	return fmt.Errorf("unpack: publish of derived sequence %d: %w", seq, e)
}

// close stops taking acks and returns the first failure; what is held or
// in flight is not waited for (the next session reads the cursor).
func (p *publisher) close() error {
	close(p.asked)
	p.sub.Unsubscribe()
	p.fail(errClosed)
	<-p.done
	if err := p.error(); !errors.Is(err, errClosed) {
		return err
	}
	return nil
}

// errClosed marks a closed publisher.
var errClosed = errors.New("unpack: publisher closed")
