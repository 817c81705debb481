package replicate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// ReadTail calls fn with the agent's committed events of stream at or
// before stream sequence upTo, newest first, until fn returns false or
// the agent has none left (markers, which carry no payload, are left
// out). It reads forward through windows of the stream that grow
// backwards from upTo (an ordered consumer filtered on the agent's
// subjects; the stream holds other agents too), so a short tail costs a
// short read. Everything in the stream is committed: a transaction is one
// message or an atomic batch.
func (s *JetStreamSink) ReadTail(ctx context.Context, stream string, upTo uint64, fn func(rec *localstream.Record) bool) error {
	_, js, err := s.link.get()
	if err != nil {
		return err
	}
	ctx, cancel := s.link.ctx(ctx)
	defer cancel()
	sctx, scancel := withDefaultTimeout(ctx, s.opts.RequestTimeout)
	st, err := js.Stream(sctx, wire.StreamName(stream))
	scancel()
	if err != nil {
		return fmt.Errorf("replicate: read tail of %s: %w", wire.StreamName(stream), err)
	}
	tok := wire.EscapeToken(s.agent)
	filter := []string{"edge." + stream + "." + tok + ".cut", "edge." + stream + "." + tok + ".part", "edge." + stream + "." + tok + ".data.*"}
	span := uint64(tailWindow)
	for end := upTo; end > 0; {
		start := uint64(1)
		if end > span {
			start = end - span + 1
		}
		evs, err := s.readRange(ctx, st, filter, start, end)
		if err != nil {
			return err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if !fn(&evs[i].Record) {
				return nil
			}
		}
		end, span = start-1, span*4
	}
	return nil
}

// tailWindow is the first window ReadTail reads back, in stream messages.
const tailWindow = 64

// readRange returns the events (markers left out) of the messages of
// filter with sequences from start to end, in stream order.
func (s *JetStreamSink) readRange(ctx context.Context, st jetstream.Stream, filter []string, start, end uint64) ([]wire.CentralEvent, error) {
	cctx, cancel := withDefaultTimeout(ctx, s.opts.RequestTimeout)
	cons, err := st.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{FilterSubjects: filter,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("replicate: read tail: %w", err)
	}
	var out []wire.CentralEvent
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("replicate: read tail: %w", err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("replicate: read tail: %w", err)
			}
			if md.Sequence.Stream > end {
				done = true
				continue
			}
			evs, _, err := wire.DecodeMessage(m.Subject(), m.Headers(), m.Data())
			if err != nil {
				return nil, fmt.Errorf("replicate: read tail: seq %d: %w", md.Sequence.Stream, err)
			}
			for _, ev := range evs {
				if ev.Dropped == "" {
					out = append(out, ev)
				}
			}
			if md.Sequence.Stream == end || md.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("replicate: read tail: %w", err)
		}
		if done || n == 0 {
			// n == 0: nothing of the agent's is left in the stream
			// after start (a fetch waits a second for one).
			return out, nil
		}
	}
}
