package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// ReplicatorConfig configures the replication of one local stream.
type ReplicatorConfig struct {
	// SinkName is the name under which the committed cut is recorded
	// locally (Stream.SetCommittedCut). Default "central".
	SinkName string
	// Priority orders streams on the shared uplink (lower first). Default
	// DefaultPriority(stream).
	Priority *int
	// MaxTxnEvents bounds a transaction's events. Default and upper
	// bound: the sink's MaxTxnEvents when it has one (layout 2: 100,000,
	// the max payload binds first; layout 1: 999, below the server's
	// 1000-message batch limit with the commit record), else 999.
	MaxTxnEvents int
	// MaxTxnBytes bounds a transaction's payload bytes. Default 8 MiB;
	// with an uplink cap at most 3 s worth of it (the server abandons a
	// batch 10 s after its first message).
	MaxTxnBytes int64
	// CommitInterval is the longest a transaction stays open after its
	// first event. Default 100 ms.
	CommitInterval time.Duration
	// IdleCommitInterval is how often an idle stream commits an empty
	// transaction when its committed watermark moved (and checks the
	// Heartbeat). Default 1 s.
	IdleCommitInterval time.Duration
	// CommitTimeout bounds the wait for a commit's ack; then the outcome
	// is read from the central store. Default 3 s.
	CommitTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered wait after a retryable
	// error. Defaults 20 ms and 250 ms: short, so that a returning link is
	// used within a second.
	MinBackoff, MaxBackoff time.Duration
	// Watermark gives the committed watermark of a cut. Default: none
	// (zero watermark in every commit record).
	Watermark CommittedWatermarkFunc
	// Uplink is the shared byte-rate cap. Default nil = unlimited.
	Uplink *Uplink
	// OnCommit, when set, is called after each commit with the ingest
	// times of its events (benchmarks, tests). It must not block.
	OnCommit func(c Committed, ingestNs []int64)
	// Takeover is the operator's order (edge-agent run --takeover) to take
	// over the agent's chain at the first central read even when another
	// store, or a copy of this one, wrote it last. Default false.
	Takeover bool
	// Station is the identity of the station (the machine) the store
	// runs on, one that survives a disk swap: MachineStation. Another
	// store of the same station that wrote the chain last is this
	// station's replaced disk (taken over at once); a run of this store
	// it never had, on the same station, wrote after a backup it was
	// restored from (continued as its own past). Default "": unknown,
	// then neither is recognised and both wait for --takeover (resume.go).
	Station string
	// Repeat describes events for the repeats of a lost state
	// (repeats.go): after a rebase, an event its intake marked as a
	// redelivery whose first copy is in the centre's tail is not sent
	// again. Default nil: every event is sent.
	Repeat RepeatFunc
	// RepeatWindow is how many of the agent's last committed events with
	// an identity a rebase reads back from the centre, and how many
	// events with an identity the set lasts. Default 65,535: the most
	// QoS 1 messages one MQTT session can have unacknowledged (16-bit
	// packet ids).
	RepeatWindow int
	// Heartbeat is the longest an idle stream goes without a commit, so
	// that the centre sees the agent and its committed watermark follow
	// the clock. Default 1 s.
	Heartbeat time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger logs state changes (never per event). Default slog.Default().
	Logger *slog.Logger
}

// txnEventLimiter is a sink that bounds a transaction's events itself.
type txnEventLimiter interface{ MaxTxnEvents() int }

// txnFitter is a transaction that tells whether one more event fits.
type txnFitter interface {
	fits(rec *localstream.Record) bool
}

// NewDefaultReplicatorConfig returns the defaults noted on each field of
// ReplicatorConfig that do not depend on the stream or the sink (Priority
// and MaxTxnEvents do: nil and 0 here), the one place their numbers are
// written (agent.NewDefaultConfig is built from it).
func NewDefaultReplicatorConfig() ReplicatorConfig {
	return ReplicatorConfig{
		SinkName:           "central",
		MaxTxnBytes:        8 << 20,
		CommitInterval:     100 * time.Millisecond,
		IdleCommitInterval: time.Second,
		CommitTimeout:      3 * time.Second,
		MinBackoff:         20 * time.Millisecond,
		MaxBackoff:         250 * time.Millisecond,
		Heartbeat:          time.Second,
		RepeatWindow:       65535,
	}
}

// withDefaults fills the unset fields of c from NewDefaultReplicatorConfig,
// the stream's DefaultPriority and the sink's transaction bound.
func (c ReplicatorConfig) withDefaults(stream string, sink Sink) ReplicatorConfig {
	d := NewDefaultReplicatorConfig()
	if c.SinkName == "" {
		c.SinkName = d.SinkName
	}
	if c.Priority == nil {
		p := DefaultPriority(stream)
		c.Priority = &p
	}
	limit := 999
	if l, ok := sink.(txnEventLimiter); ok {
		limit = l.MaxTxnEvents()
	}
	if c.MaxTxnEvents <= 0 || c.MaxTxnEvents > limit {
		c.MaxTxnEvents = limit
	}
	if c.MaxTxnBytes <= 0 {
		c.MaxTxnBytes = d.MaxTxnBytes
	}
	if r := c.Uplink.BytesPerSec(); r > 0 && !c.Uplink.Metered() {
		c.MaxTxnBytes = max(min(c.MaxTxnBytes, 3*r), 1)
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = d.CommitInterval
	}
	if c.IdleCommitInterval <= 0 {
		c.IdleCommitInterval = d.IdleCommitInterval
	}
	if c.CommitTimeout <= 0 {
		c.CommitTimeout = d.CommitTimeout
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = d.MinBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(d.MaxBackoff, c.MinBackoff)
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = d.Heartbeat
	}
	if c.RepeatWindow <= 0 {
		c.RepeatWindow = d.RepeatWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Replicator replicates one local stream to a Sink, exactly once: each
// transaction holds the events after the last committed cut, read back
// from the central store at start and after every error. New starts
// nothing; Run blocks; Stats is safe for concurrent use.
type Replicator struct {
	st   *localstream.Stream
	sink Sink
	cfg  ReplicatorConfig

	// Counters (atomic).
	txns, events, bytes         atomic.Uint64
	retries, conflicts, adopted atomic.Uint64
	wmRegressed, lost, rewinds  atomic.Uint64
	lateFlagged                 atomic.Uint64
	dropped                     atomic.Uint64
	repeatsDropped              atomic.Uint64
	repeatsKnown                atomic.Uint64

	mu sync.Mutex
	// last is the latest commit known (ours or adopted). Guarded by mu.
	last Committed
	// lastAt is when last was learned. Guarded by mu.
	lastAt time.Time
	// state is where replication is. Guarded by mu.
	state State
	// lastErr is the latest error; stopErr the permanent one. Guarded by mu.
	lastErr, stopErr error
	// failingSince is the first error after the last commit (zero: none).
	// Guarded by mu.
	failingSince time.Time
	// errEnded is when a session first read the centre after lastErr
	// (zero: lastErr is current, or none). Guarded by mu.
	errEnded time.Time
	// failWarned is when warnFailing last logged (Run's goroutine only).
	failWarned time.Time
	// lastLoss is the latest loss found (LostRange.String). Guarded by mu.
	lastLoss string
	// sending is what this run sends under once it decided: Stats shows
	// it rather than the chain's last record, which after a rebase is
	// another run's (the old base, a cut beyond this store's tail) until
	// the first commit under the new base is acked. Guarded by mu.
	sending sendPoint

	// Run-local chain state (only Run's goroutine, see chain.go).
	instance   string
	store      string // local store identity
	started    bool   // the first central read of this run happened
	startSeq   uint64 // seq of the commit record seen at the first read
	ownCommits int    // commits acked to this run
	foreign    int    // predecessors' late commits adopted during this run
	loaded     bool   // base and instance loaded/noted
	// recordedAtOpen is the local committed-cut record found at the
	// first load (before this run wrote one), nil when none.
	recordedAtOpen *localstream.StreamCut
	// high is the committed high-water mark kept while a resend has not
	// caught up with it (chain.go), nil when none.
	high *localstream.StreamCut
	// recovered is the tail this run's Open found; opens the kept Opens
	// (chain.go); decided is set once this run applied a decision.
	recovered localstream.StreamCut
	opens     []openEntry
	// recordedBy is the run that wrote the local record found at Open;
	// recorderNoted is set once this run noted itself as the recorder.
	recordedBy    string
	recorderNoted bool
	// preIdentity is set while this store is the writer of its chain's
	// records from before store identities and has committed none under
	// its identity yet (meta "preidentity", chain.go).
	preIdentity bool
	// pendingKept is set while a decision is kept (resume meta).
	pendingKept bool
	decided     bool
	base        uint32          // epoch base in use
	lostNext    *wire.LostRange // gap marker for the next commit record
	lastCommit  time.Time       // when this run last committed (heartbeat)
	prepared    bool
	localAt     time.Time              // when the committed cut was last recorded locally
	localDirty  *localstream.StreamCut // a committed cut not yet recorded locally
	// repeats is the set of the centre's tail at the point collect has
	// reached (repeats.go), nil when none; repeatsCommitted its state at
	// the last acked commit's cut repeatsCommittedAt, under
	// repeatsCommittedBase.
	repeats              *repeatSet
	repeatsCommitted     *repeatSet
	repeatsCommittedAt   localstream.StreamCut
	repeatsCommittedBase uint32
	// txnRepeats counts the repeats left out of the transaction collect
	// builds.
	txnRepeats int
	// txnCharged is what collect's events weigh before packing (payload
	// + 256 each): set against the pack's bytes on the wire it gives
	// wireRatio, by which each event's uplink reservation is scaled when
	// the cap is charged on the wire (Uplink.Dialer). 0: not learned yet
	// (1). Float64 bits.
	txnCharged int64
	wireRatio  atomic.Uint64
	// txnEst is what collect's events reserved on the uplink, settled
	// against the pack's bytes once it is written (Uplink.Settle).
	txnEst int64
	// txnRatio is the wire ratio of the transaction collect builds, from
	// its own pack (probeWire), 0 until probed; txnProbed is the weight
	// (txnCharged) at which it was last probed, txnProbeAt the one at
	// which it is probed next.
	txnRatio              float64
	txnProbed, txnProbeAt int64
}

// NewReplicator returns the replicator of st into sink. instance must be
// the same string the sink writes into commit records (random per run).
func NewReplicator(st *localstream.Stream, sink Sink, instance string, cfg ReplicatorConfig) *Replicator {
	cfg = cfg.withDefaults(st.Name(), sink)
	return &Replicator{st: st, sink: sink, cfg: cfg, instance: instance, store: st.Store().ID(), state: StateStarting}
}

// Stream is the local stream's name.
func (r *Replicator) Stream() string { return r.st.Name() }

// Run replicates until ctx ends (nil) or a permanent error (returned, and
// kept in Stats) stops this stream.
func (r *Replicator) Run(ctx context.Context) error {
	defer func() {
		if r.localDirty != nil {
			r.recordLocally(*r.localDirty, true)
		}
	}()
	backoff := r.cfg.MinBackoff
	for {
		before := r.txns.Load()
		err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		class := classify(err)
		r.mu.Lock()
		r.lastErr, r.errEnded = explainDisconnected(err), time.Time{}
		if r.failingSince.IsZero() {
			r.failingSince = r.cfg.Now()
		}
		if class == classPermanent {
			r.state, r.stopErr = StateStopped, err
			r.mu.Unlock()
			r.cfg.Logger.Error("replication stopped", "stream", r.st.Name(), "err", err)
			return err
		}
		r.state = StateRetrying
		r.mu.Unlock()
		if class == classConflict {
			r.conflicts.Add(1)
		}
		r.retries.Add(1)
		if r.txns.Load() != before {
			backoff = r.cfg.MinBackoff
		}
		d := backoff/2 + rand.N(backoff/2+1)
		r.cfg.Logger.Debug("replication retry", "stream", r.st.Name(), "class", class, "err", err, "wait", d)
		r.warnFailing(err)
		backoff = min(2*backoff, r.cfg.MaxBackoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}

// session resumes from the central cut and commits transactions until an error.
func (r *Replicator) session(ctx context.Context) error {
	name := r.st.Name()
	if !r.prepared {
		if err := r.sink.Prepare(ctx, name); err != nil {
			return err
		}
		r.prepared = true
	}
	c, err := r.sink.LastCommitted(ctx, name)
	if err != nil {
		if isStreamNotFound(err) {
			r.prepared = false
		}
		return err
	}
	cut, err := r.resume(ctx, c)
	if err != nil {
		return err
	}
	r.lastCommit = r.cfg.Now()
	rd, err := r.st.NewReader(cut, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCutMismatch, err)
	}
	defer rd.Close()
	pf := newPrefetcher(ctx, rd, 4096, max(2*r.cfg.MaxTxnBytes, 4<<20))
	defer pf.close()
	r.mu.Lock()
	r.state = StateReplicating
	if r.lastErr != nil && r.errEnded.IsZero() {
		r.errEnded = r.cfg.Now() // the centre is read: the error is past
	}
	r.mu.Unlock()
	// Pipeline: the next transaction's events are sent while the previous
	// commit waits for its ack; its commit record goes out only after that
	// ack, expecting its sequence, so the chain stays linear. When a commit
	// fails, the transaction built behind it is abandoned (nothing of it is
	// visible) and the session resumes from the central cut.
	prev, next := c, c.Record.Txn+1
	var fl *inflight
	defer func() {
		if fl != nil {
			<-fl.done
		}
	}()
	settle := func() error { // waits for the commit in flight
		if fl == nil {
			return nil
		}
		<-fl.done
		if fl.err != nil {
			return fl.err
		}
		prev, fl = fl.c, nil
		return nil
	}
	for {
		if r.sink.Limits().MaxBatchInflight < 2 {
			// The server keeps one open batch per stream: no pipelining.
			if err := settle(); err != nil {
				return err
			}
		}
		txn := r.sink.Begin(name, next)
		// The events of this transaction land after the commit it chains
		// onto: those with a time below that commit's watermark lower are
		// late (a taken-over chain's watermark can be ahead of this
		// store's backlog).
		lateBelow := prev.Record.Watermark.LowerNs
		if fl != nil {
			lateBelow = fl.lower
		}
		lastCut, ingest, err := r.collect(ctx, pf, txn, cut, fl, lateBelow)
		if err != nil {
			txn.Discard()
			return err
		}
		if err := settle(); err != nil {
			txn.Discard()
			return err
		}
		wm, err := r.watermark(lastCut, prev)
		if err != nil {
			txn.Discard()
			return err
		}
		heartbeat := r.cfg.Now().Sub(r.lastCommit) >= r.cfg.Heartbeat
		// A transaction whose events were all repeats left out still
		// moves the cut: committed, so that they are not read again.
		skipped := txn.Len() == 0 && !lastCut.Equal(cut)
		if txn.Len() == 0 && !r.watermarkMoved(prev, wm) && !heartbeat && r.lostNext == nil && !skipped {
			txn.Discard()
			// Idle: record the last committed cut locally now, not at the
			// next commit (retention and /status read it). No commit is
			// in flight here.
			if r.localDirty != nil {
				if err := r.recordLocally(*r.localDirty, true); err != nil {
					return err
				}
			}
			continue
		}
		fl = &inflight{done: make(chan struct{}), cut: lastCut, ingest: ingest,
			meta: wire.CommitMeta{Store: r.store, Station: r.cfg.Station, EpochBase: r.base, Lost: r.lostNext}, lower: wm.LowerNs,
			repeats: r.repeats.snapshot(), repeatsDropped: r.txnRepeats}
		charged, est := r.txnCharged, r.txnEst
		if r.repeats.ended() {
			r.repeats = nil // this commit's snapshot forgets the seed, once
		}
		r.lastCommit = r.cfg.Now()
		go func(fl *inflight, prev Committed) {
			defer close(fl.done)
			cctx, cancel := context.WithTimeout(ctx, r.cfg.CommitTimeout)
			defer cancel()
			fl.c, fl.err = txn.Commit(cctx, prev, toCentral(lastCut, fl.meta.EpochBase), toCentralWatermark(wm, fl.meta.EpochBase), fl.meta)
			r.learnWire(txn, charged, est)
			if fl.err == nil {
				// Booked at once (stats, local cut, OnCommit), not when
				// the next transaction is ready. Only one commit is in
				// flight, and the session touches this state only
				// when none is.
				fl.err = r.committed(fl)
			}
		}(fl, prev)
		next++
		cut = lastCut
	}
}

// sendPoint is the epoch base a run sends under and the local cut it
// sends after: the resume point of its decision, then each commit's cut.
type sendPoint struct {
	base    uint32
	cut     localstream.StreamCut
	decided bool // set by the run's first decision
}

// setSending records the base and the local cut the run sends after.
func (r *Replicator) setSending(base uint32, cut localstream.StreamCut) {
	r.mu.Lock()
	r.sending = sendPoint{base: base, cut: cut, decided: true}
	r.mu.Unlock()
}

// inflight is a commit waiting for its ack.
type inflight struct {
	done   chan struct{}
	c      Committed
	err    error
	cut    localstream.StreamCut
	ingest []int64
	meta   wire.CommitMeta
	// lower is its committed watermark's lower bound.
	lower int64
	// repeats is the set's state at cut (nil: none); repeatsDropped the
	// transaction's events left out as repeats.
	repeats        *repeatSet
	repeatsDropped int
}

func (r *Replicator) setLast(c Committed) {
	r.mu.Lock()
	r.last, r.lastAt = c, r.cfg.Now()
	r.mu.Unlock()
}

// collect adds events to txn, from cut on, until the transaction is full
// or its time is up (CommitInterval after its first event; an empty one
// waits IdleCommitInterval). It ends early when fl, the commit in flight,
// fails. It returns the cut after the last added event. A record that
// does not fit stays at the prefetcher's head for the next transaction.
// An event with a time below lateBelow (the committed watermark lower of
// the commit this transaction lands after) is sent flagged late.
func (r *Replicator) collect(ctx context.Context, pf *prefetcher, txn Txn, cut localstream.StreamCut, fl *inflight, lateBelow int64) (localstream.StreamCut, []int64, error) {
	var ingest []int64
	lastCut, owned := cut, false
	r.txnRepeats, r.txnCharged, r.txnEst = 0, 0, 0
	r.txnRatio, r.txnProbed, r.txnProbeAt = 0, 0, probeFirst
	var closeAt time.Time
	// more: another record is at hand, so the next wait on the uplink
	// follows at once (the uplink keeps the turn for it).
	add := func(f *fetched, more bool) error {
		if r.repeats.drop(r.cfg.Repeat, &f.rec) {
			// Its first copy is at the centre (repeats.go): the cut
			// passes it, nothing is sent; counted once committed.
			r.txnRepeats++
			lastCut, owned = advanceCut(lastCut, owned, f)
			return nil
		}
		est := r.onWire(len(f.rec.Payload) + 256)
		if err := r.cfg.Uplink.WaitMore(ctx, *r.cfg.Priority, est, more); err != nil {
			return err
		}
		r.txnEst += int64(est)
		r.txnCharged += int64(len(f.rec.Payload) + 256)
		rec := f.rec
		rec.Segment = shift(rec.Segment, r.base)
		if rec.EventTime < lateBelow && !rec.Flags.Has(localstream.FlagLate) {
			rec.Flags |= localstream.FlagLate
			r.lateFlagged.Add(1)
		}
		if err := txn.Add(ctx, rec); err != nil {
			if err := r.replace(ctx, txn, rec, err); err != nil {
				return err
			}
		}
		r.probeWire(txn)
		if txn.Len() == 1 {
			closeAt = r.cfg.Now().Add(r.txnInterval())
		}
		lastCut, owned = advanceCut(lastCut, owned, f)
		if r.cfg.OnCommit != nil {
			ingest = append(ingest, f.rec.IngestTime)
		}
		return nil
	}
	var flDone chan struct{}
	if fl != nil {
		flDone = fl.done
	}
	timer := time.NewTimer(r.cfg.IdleCommitInterval)
	defer timer.Stop()
	maxEvents := r.txnEvents()
	fitter, _ := txn.(txnFitter)
	for txn.Len() < maxEvents && txn.Bytes() < r.cfg.MaxTxnBytes && r.onWire(int(min(r.txnCharged, math.MaxInt32))) < r.maxTxnWire() {
		// The commit interval holds under a backlog too: with events
		// always ready (and each add paced by the uplink), only this check
		// closes the transaction on time.
		if txn.Len() > 0 && !r.cfg.Now().Before(closeAt) && !r.holdOpen(flDone) || r.sendNow(txn, fl, flDone, false) {
			return lastCut, ingest, nil
		}
		f, ok := pf.head()
		if !ok {
			var b prefetchBatch
			select {
			case b, ok = <-pf.ch: // what is there already, without arming a timer
			default:
				// Dry only at the stream's tail: a reader behind a
				// backlog (a loaded machine) has more on its way at once.
				if pf.tail && r.sendNow(txn, fl, flDone, true) {
					return lastCut, ingest, nil
				}
				wait := r.cfg.IdleCommitInterval
				if txn.Len() > 0 {
					if wait = closeAt.Sub(r.cfg.Now()); wait <= 0 {
						return lastCut, ingest, nil
					}
				}
				timer.Reset(wait)
				select {
				case b, ok = <-pf.ch:
				case <-timer.C:
					return lastCut, ingest, nil
				case <-flDone:
					if fl.err != nil {
						return cut, nil, fl.err
					}
					flDone = nil
					continue
				case <-ctx.Done():
					return cut, nil, ctx.Err()
				}
			}
			if !ok {
				return cut, nil, ctx.Err()
			}
			pf.put(b)
			continue
		}
		if f.err != nil {
			return cut, nil, f.err
		}
		if txn.Len() > 0 && txn.Bytes()+int64(len(f.rec.Payload)) > r.cfg.MaxTxnBytes {
			break
		}
		if fitter != nil && !fitter.fits(&f.rec) {
			break
		}
		pf.pop()
		_, more := pf.head()
		if err := add(&f, more || len(pf.ch) > 0); err != nil {
			return cut, nil, err
		}
	}
	return lastCut, ingest, nil
}

// watermarkMoved reports whether an empty transaction is worth committing.
func (r *Replicator) watermarkMoved(prev Committed, wm watermark.Watermark) bool {
	if prev.Seq == 0 {
		return wm.LowerNs != 0 || wm.UpperNs != 0
	}
	return wm.LowerNs != prev.Record.Watermark.LowerNs || wm.UpperNs != prev.Record.Watermark.UpperNs
}

// committed books an acked commit.
func (r *Replicator) committed(fl *inflight) error {
	c := fl.c
	r.ownCommits++
	if err := r.dropPreIdentity(); err != nil {
		return err
	}
	r.txns.Add(1)
	r.events.Add(uint64(c.Record.Events))
	r.bytes.Add(uint64(c.Record.Bytes))
	r.setLast(c)
	r.setSending(fl.meta.EpochBase, fl.cut)
	r.lastCommit = r.cfg.Now()
	r.mu.Lock()
	r.failingSince = time.Time{}
	r.mu.Unlock()
	if err := r.lossDelivered(); err != nil {
		return err
	}
	if err := r.repeatsCommit(fl); err != nil {
		return err
	}
	if err := r.recordLocally(fl.cut, false); err != nil {
		return err
	}
	if err := r.passHigh(fl.cut); err != nil {
		return err
	}
	if r.cfg.OnCommit != nil {
		r.cfg.OnCommit(c, fl.ingest)
	}
	return nil
}

// recordLocally writes the committed cut into the local store (retention
// and /status read it) at most every localCutInterval, or now when force.
// A lagging local record is safe: it only keeps data longer.
func (r *Replicator) recordLocally(cut localstream.StreamCut, force bool) error {
	now := r.cfg.Now()
	if !force && now.Sub(r.localAt) < localCutInterval {
		r.localDirty = &cut
		return nil
	}
	r.localDirty = nil
	r.localAt = now
	err := r.noteRecorder()
	if err == nil {
		err = r.st.SetCommittedCut(r.cfg.SinkName, cut)
	}
	if errors.Is(err, localstream.ErrFailed) {
		// The store failed (a failing disk): it takes no write again, and
		// what is durable in it still replicates until the agent exits.
		return nil
	}
	if err != nil {
		return fmt.Errorf("replicate: record committed cut locally: %w", err)
	}
	return nil
}

// localCutInterval throttles the local record of the committed cut (an
// fsync'd Badger write) off the transaction path.
const localCutInterval = 250 * time.Millisecond

// watermark is the committed watermark for cut (local positions), never
// below prev's, the commit it chains onto: the tracker can be rewound by
// a rebuilt smaller transaction while a larger one lands late, but a
// record never carries less than its predecessor (monotoneWatermark).
// When the tracker refuses (it already published one for a later cut of a
// failed transaction, perhaps by a previous process), prev's watermark is
// repeated: it holds for every later event.
func (r *Replicator) watermark(cut localstream.StreamCut, prev Committed) (watermark.Watermark, error) {
	if r.cfg.Watermark == nil {
		return watermark.Watermark{}, nil
	}
	wm, err := r.cfg.Watermark(cut)
	if errors.Is(err, watermark.ErrCutRegressed) {
		r.wmRegressed.Add(1)
		wm, err = watermark.Watermark{}, nil
	}
	if err != nil {
		return watermark.Watermark{}, fmt.Errorf("replicate: committed watermark: %w", err)
	}
	return monotoneWatermark(r.st.Topology(), wm, prev.Record, r.store, r.base), nil
}

func isStreamNotFound(err error) bool { return errors.Is(err, jetstream.ErrStreamNotFound) }

// meteredTxnInterval is how long a transaction stays open under a capped
// link charged on the wire: each commit waits for the previous one's ack,
// a round trip the link idles, so a commit interval of 100 ms would leave
// ~10 % of the cap unused on a 10 ms round trip; 500 ms leaves ~2 %. The
// backlog's latency is the drain's, not the interval's.
const meteredTxnInterval = 500 * time.Millisecond

// txnInterval is how long a transaction stays open after its first event.
func (r *Replicator) txnInterval() time.Duration {
	if r.cfg.Uplink.Metered() {
		return max(r.cfg.CommitInterval, meteredTxnInterval)
	}
	return r.cfg.CommitInterval
}

// holdOpen reports whether a transaction past its interval stays open
// because the commit before it (flDone) is still in flight, on a link
// charged on the wire: it could not be sent before that commit's ack
// anyway, and adding events meanwhile keeps the link busy — closed, the
// reservations would stop for the ack's round trip, and the link idle
// with them.
func (r *Replicator) holdOpen(flDone chan struct{}) bool {
	if flDone == nil || !r.cfg.Uplink.Metered() || r.cfg.Uplink.BytesPerSec() == 0 {
		return false
	}
	select {
	case <-flDone:
		return false
	default:
		return true
	}
}

// maxTxnWire bounds a transaction's expected bytes on a capped link: 3 s
// of the cap (the server abandons a batch 10 s after its first message).
// Charged on the wire this bound is on the packed bytes, so compression
// makes transactions larger in events, not the link's turns longer.
func (r *Replicator) maxTxnWire() int {
	if c := r.cfg.Uplink.BytesPerSec(); c > 0 && r.cfg.Uplink.Metered() {
		return int(min(3*c, math.MaxInt32))
	}
	return math.MaxInt
}

// wireSizer is a transaction that knows its bytes on the wire once
// committed (a layout-2 pack: compressed, framed, with its NATS headers).
type wireSizer interface {
	wireBytes() int
}

// onWire is what an event weighing n before packing is expected to take
// on the wire: n scaled by what the stream's last packs achieved, when
// the cap is charged on the wire (else n, as the cap was charged before).
func (r *Replicator) onWire(n int) int {
	if !r.cfg.Uplink.Metered() {
		return n
	}
	ratio := r.txnRatio
	if ratio == 0 {
		ratio = math.Float64frombits(r.wireRatio.Load())
	}
	if ratio == 0 {
		return n
	}
	return max(int(math.Ceil(float64(n)*ratio)), 1)
}

// learnWire sets the wire ratio from a committed transaction that weighed
// charged before packing: half its own, half the ratio before, so one odd
// pack does not swing the pacing; and settles what the transaction
// reserved on the uplink (est) against its bytes on the wire.
func (r *Replicator) learnWire(txn Txn, charged, est int64) {
	ws, ok := txn.(wireSizer)
	if !ok || charged <= 0 || ws.wireBytes() <= 0 {
		return
	}
	r.cfg.Uplink.Settle(est, int64(ws.wireBytes()))
	obs := min(max(float64(ws.wireBytes())/float64(charged), 0.001), 4)
	if old := math.Float64frombits(r.wireRatio.Load()); old > 0 {
		obs = (obs + old) / 2
	}
	r.wireRatio.Store(math.Float64bits(obs))
}

// wireProber is a transaction that can tell what its events so far
// would take on the wire (a layout-2 pack: compressed, framed).
type wireProber interface {
	probeWire() int
}

// probeFirst is the weight (payload + 256 an event) at which a
// transaction's pack is first probed, probeGrowth how much it grows
// before the next probe: the probes compress at most a third more than
// the pack's own commit does.
const (
	probeFirst  = 16 << 10
	probeGrowth = 4
)

// probeWire learns, on a link charged on the wire, what the transaction's
// events take there from its own pack as it grows (at probeFirst, then
// each probeGrowth times more): the ratio the last packs achieved can be
// far off for this one — the first pack of a run has none, and a live
// pack of a few events compresses far less than a drain's pack of
// thousands — and the reservations paced by a ratio too high leave the
// link idle (the first pack of a drain took half a second to reserve
// what crossed the link in 14 ms). What the events reserved beyond their
// bytes is settled at once, credit for the next events.
func (r *Replicator) probeWire(txn Txn) {
	if r.txnCharged >= r.txnProbeAt {
		r.probeNow(txn, probeGrowth)
	}
}

// probeNow probes the transaction's pack now (probeWire), and next once
// it weighs growth times more.
func (r *Replicator) probeNow(txn Txn, growth int64) {
	if !r.cfg.Uplink.Metered() || r.cfg.Uplink.BytesPerSec() == 0 || r.txnCharged == 0 {
		return
	}
	p, ok := txn.(wireProber)
	if !ok {
		return
	}
	r.txnProbed, r.txnProbeAt = r.txnCharged, r.txnCharged*growth
	w := int64(p.probeWire())
	r.txnRatio = min(max(float64(w)/float64(r.txnCharged), 0.001), 4)
	if r.txnEst > w {
		r.cfg.Uplink.Settle(r.txnEst, w)
		r.txnEst = w
	}
}

// sendNow reports whether a transaction closes before its interval, on
// a link charged on the wire, because the link would idle while it stays
// open. Either it began with no commit in flight (the first of a drain)
// and holds the bucket's depth, a quarter second of the link: held to
// its interval, the first pack of a drain left the link idle for it.
// Or, dry — the reader at the stream's tail, nothing more stored — with
// no commit in flight any more, it holds at least a chunk: the last pack
// of a backlog (the chunk keeps a live stream's trickle from becoming a
// commit an event). A reader that is only behind (a loaded machine) is
// not dry: taken so, the first pack of a drain closed at 512 events of
// ~4,500. Otherwise the interval and holdOpen close it: a pack sent
// while another is in flight waits for that one's ack anyway.
func (r *Replicator) sendNow(txn Txn, fl *inflight, flDone chan struct{}, dry bool) bool {
	u := r.cfg.Uplink
	if txn.Len() == 0 || !u.Metered() || u.BytesPerSec() == 0 {
		return false
	}
	if !dry {
		if fl != nil || r.txnEst < int64(u.depth()) {
			return false
		}
		// Reserved by the ratio of a smaller pack, the estimate may be
		// high: the pack itself says (at most once per doubling).
		if r.txnCharged >= 2*r.txnProbed {
			r.probeNow(txn, probeGrowth)
		}
		return r.txnEst >= int64(u.depth())
	}
	if r.txnEst < int64(u.chunk) {
		return false
	}
	if flDone != nil {
		select {
		case <-flDone:
		default:
			return false
		}
	}
	return true
}
