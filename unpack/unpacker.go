package unpack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/wire"
)

// Unpacker republishes one central stream's packed events into its
// derived stream (see the package doc). New starts nothing; Run does the
// work. Stats is safe for concurrent use.
type Unpacker struct {
	nc     *nats.Conn
	stream string
	// part is the derived stream it writes.
	part Partition
	opts Options
	log  *slog.Logger
	c    counters
}

// New returns the unpacker of local stream stream on nc, with one
// derived stream (Options.Partitions must be 0 or 1; see NewPartition).
func New(nc *nats.Conn, stream string, opts Options) (*Unpacker, error) {
	if opts.Partitions > 1 {
		return nil, fmt.Errorf("%w: %d partitions: an unpacker writes one (NewPartition)", ErrConfig, opts.Partitions)
	}
	return NewPartition(nc, Partition{Stream: stream}, opts)
}

// NewPartition returns the unpacker of one partition of a local stream
// on nc. Options.Partitions and Options.Only play no part (p says both).
func NewPartition(nc *nats.Conn, p Partition, opts Options) (*Unpacker, error) {
	opts.Partitions, opts.Only = 0, nil
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, fmt.Errorf("%w: no connection", ErrConfig)
	}
	if p.Stream == "" {
		return nil, fmt.Errorf("%w: no stream", ErrConfig)
	}
	if p.Count < 0 || p.Count > MaxPartitions || p.Index < 0 || p.Index >= max(p.Count, 1) {
		return nil, fmt.Errorf("%w: partition %d of %d", ErrConfig, p.Index, p.Count)
	}
	log := opts.Logger.With("stream", p.Stream)
	if p.partitioned() {
		log = log.With("partition", p.Index)
	}
	return &Unpacker{nc: nc, stream: p.Stream, part: p, opts: opts, log: log}, nil
}

// Stream is the local stream name.
func (u *Unpacker) Stream() string { return u.stream }

// Partition is the derived stream it writes.
func (u *Unpacker) Partition() Partition { return u.part }

// Stats returns the counters.
func (u *Unpacker) Stats() Stats {
	return Stats{
		Stream: u.stream, Derived: u.part.StreamName(), Partition: u.part.Index, Partitions: max(u.part.Count, 1), State: State(u.c.state.Load()),
		Events: u.c.events.Load(), Oversize: u.c.oversize.Load(), Corrupt: u.c.corrupt.Load(), Skipped: u.c.skipped.Load(),
		OrphanParts: u.c.orphans.Load(), Fenced: u.c.fenced.Load(), Sessions: u.c.sessions.Load(),
		SourceSeq: u.c.src.Load(), DerivedSeq: u.c.deriv.Load(), BlockedSeq: u.c.blocked.Load(), Error: u.lastError(),
		Failures: u.c.failures.Load(), RetryIn: time.Duration(u.c.retryIn.Load()),
	}
}

func (u *Unpacker) lastError() string {
	if p := u.c.err.Load(); p != nil {
		return *p
	}
	return ""
}

func (u *Unpacker) setError(err error) {
	s := err.Error()
	u.c.err.Store(&s)
}

// Run unpacks until ctx ends (then it returns nil) or a permanent error:
// ErrCursorLost, ErrBadCursor, ErrDerivedMisconfigured. Failed sessions
// (no leader, a lost link, a missing source stream) are retried; a fenced
// session makes it a standby. A source message that does not decode
// (ErrUndecodable) and is not in Options.Skip blocks it there until ctx
// ends (StateBlocked, the error in Stats and the log): the other streams'
// unpackers of a Service go on.
func (u *Unpacker) Run(ctx context.Context) error {
	defer u.c.state.Store(int32(StateStopped))
	for {
		u.c.sessions.Add(1)
		u.c.state.Store(int32(StateActive))
		err := u.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			u.setError(err)
		}
		var blocked *undecodableError
		switch {
		case errors.Is(err, ErrCursorLost), errors.Is(err, ErrBadCursor), errors.Is(err, ErrDerivedMisconfigured):
			u.log.Error("unpack: stopped", "err", err)
			return err
		case errors.As(err, &blocked):
			u.c.blocked.Store(blocked.seq)
			u.c.state.Store(int32(StateBlocked))
			u.log.Error("unpack: blocked: a source message does not decode; its events stay out of the derived stream until an operator skips it (central unpack --skip SEQ)",
				"seq", blocked.seq, "subject", blocked.subject, "err", blocked.err)
			<-ctx.Done()
			return nil
		case errors.Is(err, ErrFenced):
			u.c.fenced.Add(1)
			u.log.Info("unpack: another instance writes the derived stream; standing by", "err", err)
			u.standby(ctx)
		default:
			n := u.c.failures.Add(1)
			wait := backoff(u.opts.RetryWait, u.opts.MaxRetryWait, n)
			u.c.retryIn.Store(int64(wait))
			u.c.state.Store(int32(StateRetrying))
			if n&(n-1) == 0 {
				// Failures 1, 2, 4, 8, ...: a centre away for an hour
				// writes a dozen lines, not one per retry.
				u.log.Warn("unpack: session failed; retrying", "err", err, "failures", n, "after", wait)
			}
			sleep(ctx, wait)
			u.c.retryIn.Store(0)
		}
	}
}

// recovered notes a session that reads the source and can publish
// after failures.
func (u *Unpacker) recovered() {
	if n := u.c.failures.Swap(0); n > 0 {
		u.log.Info("unpack: recovered", "failures", n)
	}
}

// backoff is the wait after the n-th failure in a row: base doubled
// n-1 times, at most most, then a random point in its upper half (so
// that the instances of a cluster do not retry in step).
func backoff(base, most time.Duration, n uint64) time.Duration {
	d := most
	if n <= 32 && base<<(n-1) < most && base<<(n-1) > 0 {
		d = base << (n - 1)
	}
	return d/2 + rand.N(d/2+1)
}

// standby waits until the derived stream has not moved for one
// Options.StandbyCheck.
func (u *Unpacker) standby(ctx context.Context) {
	u.c.state.Store(int32(StateStandby))
	js, err := jetstream.New(u.nc)
	if err != nil {
		return
	}
	var last uint64
	for i := 0; ctx.Err() == nil; i++ {
		rctx, cancel := context.WithTimeout(ctx, u.opts.RequestTimeout)
		st, err := js.Stream(rctx, u.part.StreamName())
		cancel()
		var now uint64
		if err == nil {
			now = st.CachedInfo().State.LastSeq
		}
		if err == nil && i > 0 && now == last {
			return
		}
		last = now
		sleep(ctx, u.opts.StandbyCheck)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// idleGrace is how long the source must have nothing before the open
// batch ends.
const idleGrace = 2 * time.Millisecond

// pullBytes is the most source bytes the client buffers ahead.
const pullBytes = 64 << 20

// session resumes from the cursor and republishes until ctx ends or
// something fails.
func (u *Unpacker) session(ctx context.Context) error {
	js, err := jetstream.New(u.nc)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, u.opts.RequestTimeout)
	defer cancel()
	cur, err := readCursor(rctx, u.nc, js, u.part)
	if err != nil {
		return err
	}
	src, err := js.Stream(rctx, wire.StreamName(u.stream))
	if err != nil {
		return fmt.Errorf("unpack: source %s: %w", wire.StreamName(u.stream), err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: sourceFilters(u.stream)}
	if cur.pos.seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cur.pos.seq
	}
	cons, err := src.OrderedConsumer(rctx, cfg)
	if err != nil {
		return fmt.Errorf("unpack: read %s: %w", wire.StreamName(u.stream), err)
	}
	// The client buffers up to pullBytes of source messages (a bound in
	// bytes, not in messages: a video stream's packs are near the max
	// payload each), at least four of the largest.
	it, err := cons.Messages(jetstream.PullMaxBytes(max(pullBytes, 4*int(u.nc.MaxPayload()))))
	if err != nil {
		return fmt.Errorf("unpack: read %s: %w", wire.StreamName(u.stream), err)
	}
	u.recovered()
	ended := make(chan struct{})
	stopped := make(chan struct{})
	defer func() { close(ended); it.Stop(); <-stopped }()
	// The reader hands source messages over, so that the publishing side
	// sees when the source has nothing more for now (and ends its batch).
	type read struct {
		m   jetstream.Msg
		err error
	}
	reads := make(chan read, 16)
	go func() {
		defer close(stopped)
		for {
			m, err := it.Next()
			select {
			case reads <- read{m, err}:
			case <-ended:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	if cur.exists {
		u.c.deriv.Store(cur.last)
	}
	onAck := func(seq uint64) {
		u.c.events.Add(seq - u.c.deriv.Load())
		u.c.deriv.Store(seq)
	}
	pub, err := newPublisher(u.nc, cur.last, u.opts.MaxPending, u.opts.MaxPendingBytes, u.opts.AckTimeout, onAck)
	if err != nil {
		return err
	}
	s := &sessionState{u: u, js: js, src: src, cur: cur, pending: map[string][]sourced{}, pub: pub,
		build: newBuilder(u.part, limit{max: u.nc.MaxPayload(), reserve: fenceReserve})}
	u.log.Debug("unpack: session", "derived_last", cur.last, "from_source_seq", cur.pos.seq, "from_index", cur.pos.index)
	defer s.pub.close()
	for {
		var r read
		select {
		case r = <-reads:
		default:
			// Nothing to read now. A reader a moment behind is not an
			// idle source: only after idleGrace does the batch end (so
			// that the server acks what it holds; the next batch starts
			// behind that ack).
			idle := time.NewTimer(idleGrace)
			select {
			case r = <-reads:
			case <-idle.C:
				if err := s.pub.idle(ctx); err != nil {
					return err
				}
				select {
				case r = <-reads:
				case <-s.pub.failedC():
					return s.pub.error()
				case <-ctx.Done():
					return nil
				}
			case <-s.pub.failedC():
				return s.pub.error()
			case <-ctx.Done():
				return nil
			}
			idle.Stop()
		}
		if r.err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if perr := s.pub.error(); perr != nil {
				return perr
			}
			return fmt.Errorf("unpack: read %s: %w", wire.StreamName(u.stream), r.err)
		}
		if err := s.message(ctx, r.m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// sessionState is one session's reading and publishing state. It is not
// safe for concurrent use.
type sessionState struct {
	u   *Unpacker
	js  jetstream.JetStream
	src jetstream.Stream
	cur cursor
	// pending holds each agent's part events until their commit.
	pending map[string][]sourced
	pub     *publisher
	build   *builder
}

// message handles one source message.
func (s *sessionState) message(ctx context.Context, m jetstream.Msg) error {
	u := s.u
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	seq := md.Sequence.Stream
	u.c.src.Store(seq)
	if s.cur.skipped && seq == s.cur.pos.seq {
		return nil // skipped before (the derived stream's last message says so)
	}
	if !s.u.part.holds(m.Subject()) {
		// Another partition's agent: not decoded here, so that a pack
		// that does not decode blocks its own partition only.
		return nil
	}
	evs, commit, err := wire.DecodeMessage(m.Subject(), m.Headers(), m.Data())
	if err != nil {
		u.c.corrupt.Add(1)
		if !slices.Contains(u.opts.Skip, seq) {
			if err := s.pub.drain(ctx); err != nil {
				return err
			}
			return &undecodableError{seq: seq, subject: m.Subject(), err: err}
		}
		return s.skip(ctx, seq, m.Subject(), err)
	}
	if commit == nil {
		for i, ev := range evs {
			s.pending[ev.Agent] = append(s.pending[ev.Agent], sourced{pos: position{seq, i}, ev: ev})
		}
		return nil
	}
	parts := s.pending[commit.Agent]
	delete(s.pending, commit.Agent)
	if len(parts) > 0 && parts[0].ev.Txn != commit.Txn {
		u.c.orphans.Add(1)
		parts = nil
	}
	for i := range parts {
		if err := s.publish(ctx, &parts[i], commit.Watermark); err != nil {
			return err
		}
	}
	for i := range evs {
		if err := s.publish(ctx, &sourced{pos: position{seq, i}, ev: evs[i]}, commit.Watermark); err != nil {
			return err
		}
	}
	return nil
}

// publish sends the derived message of committed event e unless the
// cursor is at or past it.
func (s *sessionState) publish(ctx context.Context, e *sourced, wm wire.WatermarkJSON) error {
	if !e.pos.after(s.cur.pos) {
		return nil
	}
	if !s.cur.exists {
		if err := s.createDerived(ctx); err != nil {
			return err
		}
	}
	dm, over := s.build.event(e, wm)
	if over {
		s.u.c.oversize.Add(1)
	}
	return s.pub.add(ctx, dm)
}

// skip replaces the undecodable source message seq with a skip marker
// (Options.Skip).
func (s *sessionState) skip(ctx context.Context, seq uint64, subject string, cause error) error {
	u := s.u
	if !s.cur.exists {
		if err := s.createDerived(ctx); err != nil {
			return err
		}
	}
	m := skipMarker(u.part, seq, subject, cause)
	if err := s.pub.add(ctx, m); err != nil {
		return err
	}
	u.c.skipped.Add(1)
	u.log.Warn("unpack: skipped an undecodable source message (Options.Skip); a skip marker names it", "seq", seq, "subject", subject, "err", cause)
	return nil
}

// createDerived creates the derived stream (or finds it made by another
// instance) and checks its subjects.
func (s *sessionState) createDerived(ctx context.Context) error {
	u := s.u
	ctx, cancel := context.WithTimeout(ctx, u.opts.RequestTimeout)
	defer cancel()
	replicas := u.opts.Replicas
	if replicas == 0 {
		replicas = max(s.src.CachedInfo().Config.Replicas, 1)
	}
	name := u.part.StreamName()
	desc := "edge-agent per-event stream of " + wire.StreamName(u.stream)
	if u.part.partitioned() {
		desc += fmt.Sprintf(" (partition %d of %d by agent)", u.part.Index, u.part.Count)
	}
	st, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: desc + ", written by edge-agent central unpack (docs/unpack.md of edge-agent)",
		Subjects:    []string{u.part.Subjects()},
		Metadata:    u.part.metadata(),
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		AllowDirect: true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = s.js.Stream(ctx, name)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeSubjectOverlap {
		// Another count of partitions made streams on these subjects.
		return fmt.Errorf("%w: %s: its subjects %s overlap another stream's (derived streams of another partition count? docs/unpack.md): %v",
			ErrDerivedMisconfigured, name, u.part.Subjects(), err)
	}
	if err != nil {
		return fmt.Errorf("unpack: create %s: %w", name, err)
	}
	if err := checkDerived(st.CachedInfo().Config, u.part); err != nil {
		return err
	}
	if last := st.CachedInfo().State.LastSeq; last != s.cur.last {
		// Another instance wrote first.
		return fmt.Errorf("%w: %s already at sequence %d", ErrFenced, name, last)
	}
	s.cur.exists = true
	return nil
}
