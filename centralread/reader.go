package centralread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/backoff"
	"github.com/edge-agent/edge-agent/wire"
)

// ReadOptions select what a CentralReader returns.
type ReadOptions struct {
	// Agent limits the read to one agent ("" = all agents).
	Agent string
	// RoutingKey limits events to one drone ("" = all). Commit records are
	// still read, for the watermarks.
	RoutingKey string
	// CommitsOnly reads only commit records.
	CommitsOnly bool
	// StartSeq starts at this stream sequence (0 = the beginning).
	StartSeq uint64
	// Follow keeps reading new messages; otherwise Next returns io.EOF
	// once it has returned what the stream held when the reader started.
	Follow bool
	// PollWait is how long one fetch waits in Follow mode. Default 1 s.
	PollWait time.Duration
}

// ItemKind tells an event from a commit record.
type ItemKind int

const (
	// ItemEvent is a data message.
	ItemEvent ItemKind = iota + 1
	// ItemCommit is a commit record.
	ItemCommit
)

// Item is one message of a central stream, in stream order.
type Item struct {
	Kind ItemKind
	// Seq is the stream sequence.
	Seq uint64
	// Agent is the writer agent.
	Agent string
	// Event is set for ItemEvent.
	Event wire.CentralEvent
	// Commit is set for ItemCommit.
	Commit wire.CommitRecord
	// Watermark is the agent's committed watermark current at this point:
	// for an event, that of the last commit record before it; for a commit
	// record, its own.
	Watermark wire.WatermarkJSON
}

// CentralReader reads one central stream in order (an ordered consumer:
// no state on the server beyond an ephemeral consumer). It is not safe for
// concurrent use.
type CentralReader struct {
	stream string
	opts   ReadOptions
	st     jetstream.Stream
	cons   jetstream.Consumer
	// last is the sequence to stop at when not following.
	last uint64
	done bool
	wm   map[string]wire.WatermarkJSON
	// buf holds fetched messages not yet returned.
	buf []jetstream.Msg
	// items holds decoded items of a layout-2 message not yet returned.
	items []Item
	// fails counts fetches in a row that failed transiently (backoff).
	fails int
}

// Retry waits of the reader (internal/backoff: doubled per failure in a
// row, capped, jittered).
const (
	retryBase = 50 * time.Millisecond
	retryMost = 2 * time.Second
)

// NewCentralReader opens a reader of the local stream's central copy. It
// retries transient failures (elections, no responders) until ctx ends.
func NewCentralReader(ctx context.Context, nc *nats.Conn, stream string, opts ReadOptions) (*CentralReader, error) {
	for fails := 1; ; fails++ {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := newCentralReader(actx, nc, stream, opts)
		cancel()
		if err == nil || ctx.Err() != nil || !transientRead(err) {
			return r, err
		}
		if backoff.Sleep(ctx, retryBase, retryMost, fails) != nil {
			return nil, err
		}
	}
}

// Close deletes the reader's consumer at the centre at once instead of
// leaving it to expire (an ordered consumer lives 5 minutes after its last
// fetch, and a stream holds a bounded number of consumers: a tool that
// opens many readers, one per flight or per poll, must close them). It
// does not fail: a consumer that cannot be deleted expires on its own.
func (r *CentralReader) Close(ctx context.Context) {
	if r == nil || r.cons == nil {
		return
	}
	if info := r.cons.CachedInfo(); info != nil && r.st != nil {
		_ = r.st.DeleteConsumer(ctx, info.Name)
	}
	r.buf, r.items, r.done = nil, nil, true
}

// transientRead tells errors worth retrying when opening a reader.
func transientRead(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		// The ordered consumer lost its server-side consumer (deleted, a
		// member restarted, no heartbeat): its next fetch makes a new one
		// from the last sequence it delivered.
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) ||
		// A request while the connection reconnects (no buffering).
		errors.Is(err, nats.ErrReconnectBufExceeded)
}

func newCentralReader(ctx context.Context, nc *nats.Conn, stream string, opts ReadOptions) (*CentralReader, error) {
	if opts.PollWait <= 0 {
		opts.PollWait = time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, wire.StreamName(stream))
	if err != nil {
		return nil, fmt.Errorf("centralread: central stream %s: %w", wire.StreamName(stream), err)
	}
	agentTok := "*"
	if opts.Agent != "" {
		agentTok = wire.EscapeToken(opts.Agent)
	}
	keyTok := "*"
	if opts.RoutingKey != "" {
		keyTok = wire.KeyToken(opts.RoutingKey)
	}
	// Layout 2 keeps events in the messages on the cut (and part)
	// subjects; layout 1 on a data subject per routing key.
	// One reset attempt per fetch: the ordered consumer's own retry (1 s
	// to 10 s, unjittered, not bounded by ctx) would hold a read past
	// its deadline; the reader's loop retries with its backoff instead.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{"edge." + stream + "." + agentTok + ".cut"}, MaxResetAttempts: 1}
	if !opts.CommitsOnly {
		cfg.FilterSubjects = append(cfg.FilterSubjects, "edge."+stream+"."+agentTok+".part",
			"edge."+stream+"."+agentTok+".data."+keyTok)
	}
	if opts.StartSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("centralread: read %s: %w", wire.StreamName(stream), err)
	}
	r := &CentralReader{stream: stream, opts: opts, st: st, cons: cons, wm: map[string]wire.WatermarkJSON{}}
	if !opts.Follow {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		r.last = info.State.LastSeq
		if r.last == 0 || r.last < opts.StartSeq {
			r.done = true
		}
	}
	return r, nil
}

// Next returns the next item; io.EOF at the end of a non-following read.
func (r *CentralReader) Next(ctx context.Context) (Item, error) {
	for {
		if len(r.items) > 0 {
			it := r.items[0]
			r.items = r.items[1:]
			return it, nil
		}
		if len(r.buf) > 0 {
			m := r.buf[0]
			r.buf = r.buf[1:]
			md, err := m.Metadata()
			if err != nil {
				return Item{}, err
			}
			seq := md.Sequence.Stream
			if !r.opts.Follow {
				if seq > r.last {
					r.done, r.buf = true, nil
					return Item{}, io.EOF
				}
				if seq == r.last || md.NumPending == 0 {
					r.done = true
				}
			}
			if err := r.decode(m.Subject(), m.Headers(), m.Data(), seq); err != nil {
				return Item{}, err
			}
			continue
		}
		if r.done {
			return Item{}, io.EOF
		}
		if err := ctx.Err(); err != nil {
			return Item{}, err
		}
		wait := r.opts.PollWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		// What is there now, in one round trip; then, when nothing is,
		// wait for one more message.
		if err := r.fetch(ctx)(r.cons.FetchNoWait(fetchBatch)); err != nil {
			return Item{}, err
		}
		if len(r.buf) > 0 {
			continue
		}
		if !r.opts.Follow && r.caughtUp(ctx) {
			r.done = true
			continue
		}
		if err := r.fetch(ctx)(r.cons.Fetch(1, jetstream.FetchMaxWait(wait))); err != nil {
			return Item{}, err
		}
	}
}

// fetch returns what moves a fetched batch into buf (a function of the
// fetch's two results; ctx bounds the wait after a failure).
func (r *CentralReader) fetch(ctx context.Context) func(jetstream.MessageBatch, error) error {
	return func(batch jetstream.MessageBatch, err error) error { return r.take(ctx, batch, err) }
}

// take moves a fetched batch into buf.
func (r *CentralReader) take(ctx context.Context, batch jetstream.MessageBatch, err error) error {
	if err == nil {
		for m := range batch.Messages() {
			r.buf = append(r.buf, m)
		}
		err = batch.Error()
	}
	if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !transientRead(err) {
		return err
	}
	if err != nil && len(r.buf) == 0 && !errors.Is(err, jetstream.ErrNoMessages) {
		// An election or reconnect: the ordered consumer recreates
		// itself at the next fetch; wait, longer each time in a row.
		r.fails++
		return backoff.Sleep(ctx, retryBase, retryMost, r.fails)
	}
	r.fails = 0
	return nil
}

// fetchBatch is the number of messages one fetch asks for.
const fetchBatch = 512

// caughtUp reports whether the consumer has nothing pending.
func (r *CentralReader) caughtUp(ctx context.Context) bool {
	info, err := r.cons.Info(ctx)
	return err == nil && info.NumPending == 0
}

// decode turns one message into items (a layout-2 pack into its events
// and commit record) and queues them.
func (r *CentralReader) decode(subj string, h nats.Header, data []byte, seq uint64) error {
	evs, commit, err := wire.DecodeMessage(subj, h, data)
	if err != nil {
		return fmt.Errorf("seq %d: %w", seq, err)
	}
	for _, ev := range evs {
		if ev.Stream != r.stream {
			return fmt.Errorf("seq %d: %w: subject %q outside stream %s", seq, wire.ErrCorruptRecord, subj, r.stream)
		}
		// RoutingKey: a layout-2 message holds every drone of its agent;
		// a layout-1 hashed token may stand for several keys.
		if r.opts.CommitsOnly || r.opts.RoutingKey != "" && ev.Record.RoutingKey != r.opts.RoutingKey {
			continue
		}
		ev.Seq = seq
		r.items = append(r.items, Item{Kind: ItemEvent, Seq: seq, Agent: ev.Agent, Event: ev, Watermark: r.wm[ev.Agent]})
	}
	if commit != nil {
		if commit.Stream != r.stream {
			return fmt.Errorf("seq %d: %w: subject %q outside stream %s", seq, wire.ErrCorruptRecord, subj, r.stream)
		}
		r.commit(seq, commit)
	}
	return nil
}

// commit queues a commit record's item and makes its watermark current.
func (r *CentralReader) commit(seq uint64, rec *wire.CommitRecord) {
	r.wm[rec.Agent] = rec.Watermark
	r.items = append(r.items, Item{Kind: ItemCommit, Seq: seq, Agent: rec.Agent, Commit: *rec, Watermark: rec.Watermark})
}

// ReadAll reads a whole central stream (not following) into items.
func ReadAll(ctx context.Context, nc *nats.Conn, stream string, opts ReadOptions) ([]Item, error) {
	opts.Follow = false
	r, err := NewCentralReader(ctx, nc, stream, opts)
	if err != nil {
		return nil, err
	}
	var out []Item
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, it)
	}
}
