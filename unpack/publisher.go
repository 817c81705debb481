package unpack

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publisher sends derived messages in order, each expecting the derived
// stream's last sequence to be its predecessor's, with up to max in
// flight; a goroutine takes the acks in order. The first failure sticks:
// every later publish returns it, and failed is closed. publish and close
// are for one goroutine; err is safe for concurrent use.
type publisher struct {
	js jetstream.JetStream
	// last is the sequence the next message's predecessor will have.
	last uint64
	// slots holds one token per message in flight.
	slots chan struct{}
	acks  chan pending
	onAck func(seq uint64)
	done  chan struct{}
	// failed is closed at the first failure.
	failed chan struct{}

	mu  stdsync.Mutex
	err error // guarded by mu
}

// pending is a publish awaiting its ack and the sequence it must get.
type pending struct {
	f    jetstream.PubAckFuture
	want uint64
}

func newPublisher(js jetstream.JetStream, last uint64, max int, onAck func(uint64)) *publisher {
	p := &publisher{js: js, last: last, slots: make(chan struct{}, max), acks: make(chan pending, max),
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

func (p *publisher) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// publish sends m behind the previous message.
func (p *publisher) publish(ctx context.Context, m *nats.Msg) error {
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
	f, err := p.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(p.last))
	if err != nil {
		<-p.slots
		p.fail(fmt.Errorf("unpack: publish: %w", err))
		return p.error()
	}
	p.last++
	p.acks <- pending{f: f, want: p.last}
	return nil
}

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
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				p.fail(fmt.Errorf("%w: derived sequence %d: %v", ErrFenced, a.want, err))
			} else {
				p.fail(fmt.Errorf("unpack: publish of derived sequence %d: %w", a.want, err))
			}
		}
		<-p.slots
	}
}

// close waits for every ack in flight and returns the first failure.
func (p *publisher) close() error {
	close(p.acks)
	<-p.done
	return p.error()
}
