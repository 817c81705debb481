package watermark

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// MetaStore is the small part of *localstream.Store the Tracker persists
// marks and watermarks in.
type MetaStore interface {
	PutMeta(key string, val []byte) error
	GetMeta(key string) ([]byte, bool, error)
	ScanMeta(prefix string) (map[string][]byte, error)
	DeleteMeta(key string) error
}

// StreamView is what the Tracker reads of its stream; *localstream.Stream
// satisfies it.
type StreamView interface {
	Name() string
	Topology() localstream.Topology
}

// Options configure a Tracker. The zero value is usable.
type Options struct {
	// IdleTimeout is how long a writer may go without noting time before
	// it stops holding the watermark back. Default 30s; negative disables.
	IdleTimeout time.Duration
	// AllowedLateness is the out-of-orderness allowed to every writer of
	// the stream: a writer's noted time is the max event time it noted
	// minus this. Default 0 (sources in order).
	AllowedLateness time.Duration
	// MaxClockSkew is how far an event time may be ahead of its ingest
	// time. An event further ahead keeps its time but is flagged
	// clock-skew and counted, and its mark is bounded to ingest −
	// MaxClockSkew; an event within it marks at most its ingest time, so
	// no watermark is ever ahead of the receiving clock. A stream with no
	// open writer (all closed or behind) follows now − MaxClockSkew.
	// Default 10s
	// (GPS/NTP clocks are within milliseconds; 10 s allows for a week of
	// free-running RTC drift and delivery jitter); negative disables.
	MaxClockSkew time.Duration
	// MaxClockBehind is how far an event time may be behind its ingest
	// time. An event further behind is flagged clock-skew and late and
	// counted; its writer stops holding the watermark back until an event
	// within bounds. Default 10m (longer than chunk durations and short
	// uplink/broker outages; a clock reset to 1970 or a day off is far
	// beyond); negative disables.
	MaxClockBehind time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives rare events (load problems, persist failures).
	// Default slog.Default().
	Logger *slog.Logger
	// MarkFlushInterval is how often Local and CommittedAt also write the
	// writers' marks (each is one store write, fsync'd). The watermark they
	// return is always written first. Marks older on disk than in memory
	// only make the first watermarks after a restart wait for new marks;
	// they are never older than the last one published. Default 1s;
	// negative writes marks on every call.
	MarkFlushInterval time.Duration
}

// DefaultOptions returns the defaults noted on each field of Options: the
// one place their numbers are written (agent.NewDefaultConfig is built
// from it). The injected functions and the logger are left nil: nil is
// their default (time.Now, slog.Default()).
func DefaultOptions() Options {
	return Options{
		IdleTimeout:       30 * time.Second,
		MaxClockSkew:      10 * time.Second,
		MaxClockBehind:    10 * time.Minute,
		MarkFlushInterval: time.Second,
	}
}

// withDefaults fills the unset fields of o from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.IdleTimeout == 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.MaxClockSkew == 0 {
		o.MaxClockSkew = d.MaxClockSkew
	}
	if o.MaxClockBehind == 0 {
		o.MaxClockBehind = d.MaxClockBehind
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MarkFlushInterval == 0 {
		o.MarkFlushInterval = d.MarkFlushInterval
	}
	return o
}

// Validate rejects impossible options.
func (o Options) Validate() error {
	if o.AllowedLateness < 0 {
		return fmt.Errorf("watermark: allowed lateness %s is negative; use 0 for in-order sources", o.AllowedLateness)
	}
	return nil
}

// Meta keys. Writer ids may contain '/', stream names may not, so the
// stream's prefix is unambiguous.
func writerPrefix(stream string) string        { return "wm/" + stream + "/" }
func writerKey(stream, writer string) string   { return writerPrefix(stream) + writer }
func publishedKey(stream, which string) string { return "wmpub/" + stream + "/" + which }

// Tracker turns the writer marks of one stream into local and committed
// watermarks and persists them. It is safe for concurrent use; calls for
// one writer are expected in order (one goroutine per writer), as an
// ingest produces them: Late, append, Note.
//
// Persistence: a writer's first mark (its floor) and its close are written
// before Note and CloseWriter return; a new watermark is written before
// Local or CommittedAt returns it; other marks are written by those calls
// at most every MarkFlushInterval, and by Flush. A restart therefore
// resumes with every published watermark, never an older one; marks lost
// with it only delay the next watermarks (see the package doc).
type Tracker struct {
	st   StreamView
	meta MetaStore
	opts Options
	log  *slog.Logger

	// persistMu serialises writes to meta so that an older record never
	// overwrites a newer one. Acquired before mu.
	persistMu sync.Mutex
	// mu guards the fields below.
	mu sync.Mutex
	// c is the deterministic core.
	c *core
	// topo is the newest topology snapshot taken (segments never vanish
	// and predecessor links never change, so it serves Note's ancestry checks).
	topo localstream.Topology
	// lastMarkFlush is when dirty marks were last written, Unix ns.
	lastMarkFlush int64
}

// NewTracker returns the tracker of stream st, loading the marks and
// watermarks persisted in meta. It starts nothing.
func NewTracker(st StreamView, meta MetaStore, opts Options) (*Tracker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	t := &Tracker{st: st, meta: meta, opts: opts, log: opts.Logger,
		c: newCore(st.Name(), coreConfig{idleNs: int64(opts.IdleTimeout), latenessNs: int64(opts.AllowedLateness),
			skewNs: int64(opts.MaxClockSkew), behindNs: int64(opts.MaxClockBehind)})}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

// load reads the persisted writers and watermarks. A record that cannot be
// decoded is an error: starting without it could publish an older watermark.
func (t *Tracker) load() error {
	name := t.st.Name()
	t.topo = t.st.Topology()
	recs, err := t.meta.ScanMeta(writerPrefix(name))
	if err != nil {
		return fmt.Errorf("watermark: load marks of %q: %w", name, err)
	}
	dropped := 0
	for key, b := range recs {
		id := strings.TrimPrefix(key, writerPrefix(name))
		r, err := unmarshalWriterRecord(b)
		if err != nil {
			return fmt.Errorf("watermark: writer %q of %q: %w", id, name, err)
		}
		dropped += t.c.restore(t.topo, id, r)
	}
	if dropped > 0 {
		t.log.Warn("watermark: dropped persisted positions the store does not hold", "stream", name, "positions", dropped)
	}
	var ws [2][]Watermark
	var flags byte
	for i, which := range []string{"local", "committed"} {
		b, ok, err := t.meta.GetMeta(publishedKey(name, which))
		if err != nil {
			return fmt.Errorf("watermark: load %s watermark of %q: %w", which, name, err)
		}
		if !ok {
			continue
		}
		var f byte
		if ws[i], f, err = unmarshalWatermarks(b); err != nil {
			return fmt.Errorf("watermark: %s watermark of %q: %w", which, name, err)
		}
		if which == "committed" {
			flags = f
		}
	}
	t.c.restoreWatermarks(t.topo, ws[0], ws[1], flags&wmFlagPruned != 0)
	// Marks noted before a crash may be lost: hold until the watermarks
	// cover everything durable now.
	t.c.holdUntil(t.topo.TailCut())
	return nil
}

func (t *Tracker) now() int64 { return t.opts.Now().UnixNano() }

// Admit is asked before an event of writer with time eventTimeNs, received
// at ingestNs (the agent's clock), is appended: the Admission says which
// flags to set (late, clock-skew) and bounds what the event may note
// afterwards (NoteAdmitted). The caller appends the event whatever the
// answer. Admit also marks the writer active: a closed or idle writer
// comes back with its next event.
func (t *Tracker) Admit(writer string, eventTimeNs, ingestNs int64) Admission {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c.admit(writer, eventTimeNs, ingestNs, t.now())
}

// Late is Admit without a receiving clock (no bound applies): for tools
// and tests that replay times of their own. Ingests use Admit.
func (t *Tracker) Late(writer string, eventTimeNs int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c.late(writer, eventTimeNs, t.now())
}

// NoteAdmitted is Note for an event admitted with a whose latest time is
// eventTimeNs (a video chunk: its last frame's): it notes a.Mark(eventTimeNs),
// and an event admitted behind the receiving clock notes its position
// without making its writer hold the committed watermark back.
func (t *Tracker) NoteAdmitted(writer string, a Admission, eventTimeNs int64, pos localstream.Position) error {
	return t.note(writer, a.Mark(eventTimeNs), pos, a.Skew == SkewBehind)
}

// Note records that writer's event with time eventTimeNs is durable at
// pos: all its later events are at or after that time (minus the allowed
// lateness). A time earlier than the writer's noted time (ErrTimeBackwards)
// or a position not after its previous one (ErrPositionNotAdvancing) is
// refused and counted, never applied.
func (t *Tracker) Note(writer string, eventTimeNs int64, pos localstream.Position) error {
	return t.note(writer, eventTimeNs, pos, false)
}

func (t *Tracker) note(writer string, eventTimeNs int64, pos localstream.Position, behind bool) error {
	t.mu.Lock()
	if _, ok := t.topo.Segments[pos.Segment]; !ok {
		t.topo = t.st.Topology()
	}
	if _, ok := t.topo.Segments[pos.Segment]; !ok {
		t.mu.Unlock()
		return fmt.Errorf("%w: writer %q noted %s, an unknown segment", localstream.ErrForeignCut, writer, pos)
	}
	w := t.c.writers[writer]
	first := w == nil || !w.hasMark
	err := t.c.noteMark(t.topo, writer, eventTimeNs, pos, t.now(), behind)
	t.mu.Unlock()
	if err != nil || !first {
		return err
	}
	// The first mark carries the writer's floor: write it now.
	return t.persist(nil, false, writer)
}

// CloseWriter stops writer from counting at once (drone landed, source
// gone). It comes back with its next event. Closing is persisted.
func (t *Tracker) CloseWriter(writer string) error {
	t.mu.Lock()
	t.c.close(writer)
	t.mu.Unlock()
	return t.persist(nil, false, writer)
}

// Local returns the local watermark, over durable marks (for /status). A
// new one is emitted only when the lower bound advances; otherwise the
// previous one is returned. The zero Watermark means none yet.
func (t *Tracker) Local() (Watermark, error) {
	var w Watermark
	err := t.persist(func() error {
		t.topo = t.st.Topology()
		var err error
		w, err = t.c.localAt(t.topo, t.now())
		return err
	}, false)
	return w, err
}

// CommittedAt returns the committed watermark for committed cut cut: only
// marks whose positions lie inside cut count, and the result's cut is at
// or before cut. Results are monotone across calls; a cut before the
// previous result's cut is refused with ErrCutRegressed. The zero
// Watermark means none yet.
func (t *Tracker) CommittedAt(cut localstream.StreamCut) (Watermark, error) {
	var w Watermark
	err := t.persist(func() error {
		t.topo = t.st.Topology()
		var err error
		w, err = t.c.committedAt(t.topo, cut, t.now())
		return err
	}, false)
	return w, err
}

// Flush writes every mark not yet persisted.
func (t *Tracker) Flush() error { return t.persist(nil, true) }

// Stats returns a snapshot of the counters.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.c.stats
	now := t.now()
	s.Writers = len(t.c.writers)
	for _, w := range t.c.writers {
		if w.holds(now, t.c.idleNs) && (w.hasMark || w.inflight) {
			s.ActiveWriters++
		}
		if w.behind {
			s.BehindWriters++
		}
	}
	return s
}

// SkewedWriters returns the writers that had an event out of the
// receiving clock's bounds since the tracker started, by id.
func (t *Tracker) SkewedWriters() []WriterSkew {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []WriterSkew
	for _, id := range t.c.writerIDs() {
		w := t.c.writers[id]
		if w.skewAhead > 0 || w.skewBehind > 0 {
			out = append(out, WriterSkew{Writer: id, Ahead: w.skewAhead, Behind: w.skewBehind, IsBehind: w.behind})
		}
	}
	return out
}

// persist runs compute (if any) under the lock, then writes the newly
// emitted watermarks and, when marks is set or MarkFlushInterval passed,
// the dirty writers (or, with only, those writers). A failed write leaves
// them dirty for the next call and is returned.
func (t *Tracker) persist(compute func() error, marks bool, only ...string) error {
	t.persistMu.Lock()
	defer t.persistMu.Unlock()
	name := t.st.Name()

	t.mu.Lock()
	var cerr error
	if compute != nil {
		cerr = compute()
	}
	var recs map[string]writerRecord
	if now := t.now(); marks || now-t.lastMarkFlush >= int64(t.opts.MarkFlushInterval) {
		recs = t.c.takeDirty()
		t.lastMarkFlush = now
	} else if len(only) > 0 {
		recs = t.c.takeDirty(only...)
	}
	type pub struct {
		which string
		ws    []Watermark
		flags byte
	}
	var pubs []pub
	if t.c.localDirty {
		pubs = append(pubs, pub{"local", []Watermark{t.c.local}, 0})
		t.c.localDirty = false
	}
	if t.c.committedDirty {
		var f byte
		if t.c.pruned {
			f = wmFlagPruned
		}
		pubs = append(pubs, pub{"committed", slices.Clone(t.c.results), f})
	}
	t.c.committedDirty = false
	t.mu.Unlock()

	var errs []error
	var failedPub []string
	for _, p := range pubs {
		var err error
		if len(p.ws) == 0 {
			// Rewound to before the first committed watermark.
			err = t.meta.DeleteMeta(publishedKey(name, p.which))
		} else {
			var b []byte
			if b, err = marshalWatermarks(p.ws, p.flags); err == nil {
				err = t.meta.PutMeta(publishedKey(name, p.which), b)
			}
		}
		if err != nil {
			failedPub = append(failedPub, p.which)
			errs = append(errs, err)
		}
	}
	var failed []string
	for id, r := range recs {
		if err := t.meta.PutMeta(writerKey(name, id), r.marshal()); err != nil {
			failed = append(failed, id)
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.mu.Lock()
		t.c.putBackDirty(failed)
		for _, which := range failedPub {
			if which == "local" {
				t.c.localDirty = true
			} else {
				t.c.committedDirty = true
			}
		}
		t.c.stats.PersistErrors++
		n := t.c.stats.PersistErrors
		t.mu.Unlock()
		if n&(n-1) == 0 { // 1, 2, 4, 8, ...: bounded logging
			t.log.Error("watermark: persisting marks failed", "stream", name, "failures", n, "err", errs[0])
		}
		return errors.Join(cerr, fmt.Errorf("watermark: persist %q: %w", name, errors.Join(errs...)))
	}
	return cerr
}
