package watermark

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/edge-agent/edge-agent/localstream"
)

const (
	// maxWriters bounds the writers of one stream (rule 9). Beyond it new
	// writer ids are refused with ErrTooManyWriters and counted.
	maxWriters = 4096
	// maxWriterID bounds a writer id's length in bytes.
	maxWriterID = 255
	// maxResults is how many recent committed watermarks are kept so that a
	// failed transaction may be rebuilt with a smaller cut.
	maxResults = 32
)

// core is the deterministic heart of a Tracker: it is fed marks, the
// current time (Unix ns) and topology snapshots as arguments, and performs
// no I/O. It is not safe for concurrent use; the Tracker serialises calls.
type core struct {
	// stream is the stream's name.
	stream string
	// idleNs is the idle timeout in ns; <= 0 disables it.
	idleNs int64
	// latenessNs is the allowed lateness in ns (noted = max seen - lateness).
	latenessNs int64
	// skewNs and behindNs bound event times by the receiving clock
	// (clockbound.go); <= 0 disables each.
	skewNs, behindNs int64
	// writers holds every known writer by id.
	writers map[string]*writer
	// local is the last local watermark emitted (zero: none yet).
	local Watermark
	// results are the last committed watermarks returned, oldest first,
	// at most maxResults; the newest is the published one.
	results []Watermark
	// pruned is set once older results were dropped (or restored so):
	// committedAt can then not rewind before results[0].
	pruned bool
	// restartTail is the stream's tail when the state was loaded. Marks
	// noted before a crash may be lost, so events up to it are of unknown
	// writers and times: the next local watermark's cut is joined with it
	// (localHold); no committed watermark is emitted before the committed
	// cut reaches it, and those emitted after are joined with it
	// (committedHold, until no kept result lies before it).
	restartTail              localstream.StreamCut
	localHold, committedHold bool
	// localDirty / committedDirty: the emitted watermark is not persisted yet.
	localDirty, committedDirty bool
	// stats are the counters.
	stats Stats
}

// coreConfig is what a core is built with; durations in ns.
type coreConfig struct {
	idleNs, latenessNs, skewNs, behindNs int64
}

func newCore(stream string, cfg coreConfig) *core {
	return &core{stream: stream, idleNs: cfg.idleNs, latenessNs: cfg.latenessNs,
		skewNs: cfg.skewNs, behindNs: cfg.behindNs, writers: map[string]*writer{}}
}

// config returns what the core was built with.
func (c *core) config() coreConfig {
	return coreConfig{idleNs: c.idleNs, latenessNs: c.latenessNs, skewNs: c.skewNs, behindNs: c.behindNs}
}

// writer returns the state of id, creating it.
func (c *core) writer(id string) (*writer, error) {
	w, ok := c.writers[id]
	if ok {
		return w, nil
	}
	if len(id) == 0 || len(id) > maxWriterID {
		return nil, fmt.Errorf("%w: %d bytes, want 1..%d", ErrInvalidWriter, len(id), maxWriterID)
	}
	if len(c.writers) >= maxWriters {
		c.stats.WritersRefused++
		return nil, fmt.Errorf("%w: %d writers", ErrTooManyWriters, len(c.writers))
	}
	w = &writer{id: id, admitted: math.MinInt64}
	c.writers[id] = w
	return w, nil
}

// late is admit without a receiving clock: no bound applies.
func (c *core) late(id string, t, now int64) bool { return c.admit(id, t, noIngest, now).Late }

// admit answers, for an event of writer id with time t ingested at ingest
// (not yet appended), which flags it gets and what it may note
// (clockbound.go). It is late when it is behind the receiving clock,
// earlier than a watermark already published (local or committed), or
// earlier than the writer's own noted time (Note would reject it). It also
// marks the writer active: a closed or idle writer comes back with its
// next event.
func (c *core) admit(id string, t, ingest, now int64) Admission {
	a := c.classify(t, ingest)
	a.Late = a.Late || (!c.local.IsZero() && t < c.local.LowerNs) ||
		(len(c.results) > 0 && t < c.committedWM().LowerNs)
	switch a.Skew {
	case SkewAhead:
		c.stats.ClockSkewAhead++
	case SkewBehind:
		c.stats.ClockSkewBehind++
	}
	w, err := c.writer(id)
	if err != nil {
		// Refused writer: its marks will be refused too, so it never
		// counts; answer from the published watermarks alone.
		if a.Late {
			c.stats.Late++
		}
		return a
	}
	a.Late = a.Late || (w.hasMark && t < w.noted)
	if a.bounded {
		a.floorNs = w.admitted
		w.admitted = a.Mark(t)
	}
	switch a.Skew {
	case SkewAhead:
		w.skewAhead++
	case SkewBehind:
		w.skewBehind++
	}
	w.behind = a.Skew == SkewBehind
	if w.closed {
		w.closed, w.dirty = false, true
	}
	w.lastActive = now
	if a.Late {
		c.stats.Late++
		return a
	}
	// The event is in flight until its Note. A writer without a mark keeps
	// the lowest time in flight (its appends may be pipelined); that time
	// is the bounded one, never a clock's runaway value.
	m := a.Mark(t)
	if !w.inflight || w.hasMark || m < w.inflightT {
		w.inflightT = m
	}
	w.inflight, w.inflightSince = true, now
	return a
}

// note applies writer id's mark "time t at durable position p". topo must
// know p's segment and those the writer noted before.
func (c *core) note(topo localstream.Topology, id string, t int64, p localstream.Position, now int64) error {
	return c.noteMark(topo, id, t, p, now, false)
}

// noteMark is note; behind is set for an event admitted behind the
// receiving clock: its mark carries the position (and the bounded time)
// but does not make the writer count in the committed view.
func (c *core) noteMark(topo localstream.Topology, id string, t int64, p localstream.Position, now int64, behind bool) error {
	w, err := c.writer(id)
	if err != nil {
		return err
	}
	if w.hasMark {
		if t < w.noted {
			w.inflight = false
			c.stats.RejectedBackwards++
			return fmt.Errorf("%w: writer %q noted %d, now %d", ErrTimeBackwards, id, w.noted, t)
		}
		if err := w.checkPosition(topo, p); err != nil {
			w.inflight = false
			c.stats.RejectedNotAdvancing++
			return err
		}
	}
	if !w.hasMark || t > w.maxSeen {
		w.maxSeen = t
	}
	// The next admitted marks start at least here (see Admission.Mark).
	w.admitted = max(w.admitted, w.maxSeen)
	noted := w.maxSeen - c.latenessNs
	if !w.hasMark {
		w.noted = noted
		if w.base == nil {
			// The floor bounds every event not yet committed, this one
			// included: a mark speaks for the writer's later events only,
			// and the event noting it may be earlier (a video chunk
			// notes its last frame, its time is its first's), as may one
			// still in flight. Admit kept the lowest admitted time.
			w.floor = noted
			if w.inflight {
				w.floor = min(w.floor, w.inflightT)
			}
		}
	}
	w.noted = max(w.noted, noted)
	w.advance(topo, p)
	// The writer returns with this mark, unless it was closed while this
	// event was in flight.
	reopen := !(w.closed && w.inflight)
	w.hasMark, w.closed, w.inflight, w.dirty = true, w.closed && !reopen, false, true
	w.lastActive = now
	c.stats.HistoryThinned += uint64(w.record(behind))
	c.stats.Notes++
	return nil
}

// close stops writer id from counting until it returns.
func (c *core) close(id string) {
	w, ok := c.writers[id]
	if !ok || w.closed {
		return
	}
	w.closed, w.dirty = true, true
	c.stats.Closes++
}

// candidate is a watermark computed from the marks, before the emission rule.
type candidate struct {
	// ok is set once a writer counts for the lower bound.
	ok bool
	// lower is the min over counted writers; upper the max time of the
	// marks whose positions build the cut.
	lower, upper int64
	// positions are those of the marks that build the cut.
	positions []localstream.Position
}

// count takes a counted writer's time into the lower bound.
func (k *candidate) count(t int64) {
	if !k.ok {
		k.lower, k.ok = t, true
		return
	}
	k.lower = min(k.lower, t)
}

// use takes a mark into the cut and the upper bound. Positions topo does
// not hold are skipped (a smaller cut is the safe side); they cannot occur
// unless the store lost durable data.
func (k *candidate) use(topo localstream.Topology, m mark) {
	for _, p := range m.pos {
		if validPosition(topo, p) {
			k.positions = append(k.positions, p)
		}
	}
	k.upper = max(k.upper, m.t)
}

// followClock makes a candidate of a stream with no open writer follow
// the receiving clock (clockFloor): a stream whose drones landed, or that
// has none, advances, so that a time cut across streams completes.
func (c *core) followClock(k *candidate, now int64) {
	if k.ok || c.anyOpen() {
		return
	}
	if f, ok := c.clockFloor(now); ok {
		k.lower, k.ok = f, true
		c.stats.ClockFloored++
	}
}

// liveMarks reports whether any of the marks stands for an event that was
// not admitted behind the receiving clock.
func liveMarks(ms []mark) bool {
	for _, m := range ms {
		if !m.behindOnly {
			return true
		}
	}
	return false
}

// localAt computes and emits the local watermark at time now over topo.
func (c *core) localAt(topo localstream.Topology, now int64) (Watermark, error) {
	var k candidate
	for _, id := range c.writerIDs() {
		w := c.writers[id]
		if w.hasMark {
			k.use(topo, mark{t: w.noted, pos: w.pos})
		}
		if !w.holds(now, c.idleNs) {
			continue
		}
		switch {
		case w.hasMark:
			k.count(w.noted)
		case w.inflight:
			k.count(w.inflightT)
		}
	}
	c.followClock(&k, now)
	base := topo.OpenAtZero()
	if c.localHold {
		var err error
		if base, err = topo.Join(base, c.restartTail); err != nil {
			return c.local, err
		}
	}
	next, emitted, err := c.emit(topo, c.local, k, base, topo.TailCut())
	if err != nil {
		return c.local, err
	}
	if emitted && c.localHold {
		// Filling with the restart tail is not enough where marks touch;
		// join so that every event from before the restart is inside.
		if next.Cut, err = topo.Join(next.Cut, c.restartTail); err != nil {
			return c.local, err
		}
		c.localHold = false
	}
	if emitted {
		c.local, c.localDirty = next, true
		c.stats.LocalEmitted++
	}
	return c.local, nil
}

// committedAt computes and emits the committed watermark for the committed
// cut cut at time now over topo: only marks inside cut are used, and the
// result's cut is at or before cut.
//
// A transaction whose commit failed may be rebuilt with a smaller cut, so
// cut may lie before the watermark returned last: the core then rewinds to
// the newest of its recent results (at most maxResults) whose cut is at or
// before cut — the later ones were never committed — and continues from
// there. Before all of them, when older ones were dropped: ErrCutRegressed
// (the caller may then reuse the watermark of its last committed record).
func (c *core) committedAt(topo localstream.Topology, cut localstream.StreamCut, now int64) (Watermark, error) {
	top := c.committedWM()
	if err := topo.Validate(cut); err != nil {
		return top, err
	}
	j := len(c.results) - 1
	for ; j >= 0; j-- {
		le, err := topo.LessEq(c.results[j].Cut, cut)
		if err != nil {
			return top, err
		}
		if le {
			break
		}
	}
	if j < 0 && c.pruned && len(c.results) > 0 {
		// (With none kept, e.g. every restored one was beyond a local
		// tail lost since, there is nothing to rewind to: start afresh.)
		return top, fmt.Errorf("%w: %s is before %s, the oldest of the last %d committed watermarks",
			ErrCutRegressed, cut, c.results[0].Cut, len(c.results))
	}
	if j < len(c.results)-1 {
		c.stats.CommittedRewound += uint64(len(c.results) - 1 - j)
		c.results = c.results[:j+1]
		c.committedDirty = true
	}
	prev := c.committedWM()
	if c.committedHold {
		le, err := topo.LessEq(c.restartTail, cut)
		if err != nil {
			return prev, err
		}
		if !le {
			c.stats.CommittedHeld++
			return prev, nil
		}
	}
	// rest: the writers that do not count, at their newest mark inside
	// the cut (below).
	var k, rest candidate
	for _, id := range c.writerIDs() {
		w := c.writers[id]
		n, err := insideCount(topo, cut, w.hist)
		if err != nil {
			return prev, err
		}
		base := w.base
		if n > 0 {
			base = &w.hist[n-1]
		}
		if base != nil {
			k.use(topo, *base)
		}
		uncommitted := n < len(w.hist)
		switch {
		case !liveMarks(w.hist[n:]) && !w.holds(now, c.idleNs):
			// Closed, idle or behind, and every event it wrote that is
			// not late is committed: it does not hold the others back.
			if base != nil {
				rest.count(base.t)
			}
		case base != nil:
			// Its events after the base mark are at or after the base's time.
			k.count(base.t)
		case uncommitted:
			// Nothing committed yet: its events are at or after its floor.
			k.count(w.floor)
		case w.inflight:
			// First event in flight, not yet noted.
			k.count(w.inflightT)
		}
	}
	c.followClock(&k, now)
	if !k.ok && rest.ok {
		// None counts and one is still open (idle: its backlog may
		// still come, so the clock does not move the stream): the stream
		// stays at what they committed, the oldest of their newest marks
		// inside the cut — their later events are at or after these,
		// since a writer's marks never go back (an earlier event is
		// late). Held at the last result instead, the lower of a drain
		// that outlasted the idle timeout stayed a whole commit behind
		// its events at the last commit (BenchmarkDrainAfterOutage,
		// random: 6.95–17.2 s, bound 2.3 s).
		k.lower, k.ok = rest.lower, true
	}
	next, emitted, err := c.emit(topo, prev, k, cut, cut)
	if err != nil {
		return prev, err
	}
	if emitted && c.committedHold {
		if next.Cut, err = topo.Join(next.Cut, c.restartTail); err != nil {
			return prev, err
		}
	}
	if emitted {
		c.results = append(c.results, next)
		c.committedDirty = true
		c.stats.CommittedEmitted++
		if len(c.results) > maxResults {
			c.results = slices.Delete(c.results, 0, len(c.results)-maxResults)
			c.pruned = true
			if err := c.prune(topo, c.results[0].Cut); err != nil {
				return next, err
			}
			if c.committedHold {
				// No rewind can go before the restart tail any more.
				le, err := topo.LessEq(c.restartTail, c.results[0].Cut)
				if err != nil {
					return next, err
				}
				c.committedHold = !le
			}
		}
	}
	return c.committedWM(), nil
}

// committedWM is the committed watermark returned last (zero: none yet).
func (c *core) committedWM() Watermark {
	if len(c.results) == 0 {
		return Watermark{}
	}
	return c.results[len(c.results)-1]
}

// prune folds every writer's marks inside oldest (the cut of the oldest
// result kept, at or before every cut committedAt still accepts) into its
// base.
func (c *core) prune(topo localstream.Topology, oldest localstream.StreamCut) error {
	for _, w := range c.writers {
		n, err := insideCount(topo, oldest, w.hist)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		b := w.hist[n-1]
		w.base = &b
		w.hist = slices.Delete(w.hist, 0, n)
		w.dirty = true
	}
	return nil
}

// insideCount returns how many of the marks, oldest first, lie inside
// cut. Positions only grow along a history, so those inside form a prefix.
func insideCount(topo localstream.Topology, cut localstream.StreamCut, hist []mark) (int, error) {
	var ierr error
	n := sort.Search(len(hist), func(i int) bool {
		in, err := markInside(topo, cut, hist[i])
		if err != nil && ierr == nil {
			ierr = err
		}
		return !in
	})
	return n, ierr
}

// markInside reports whether every position of m is before cut.
func markInside(topo localstream.Topology, cut localstream.StreamCut, m mark) (bool, error) {
	for _, p := range m.pos {
		if off, ok := cut.Positions[p.Segment]; ok {
			if p.Offset >= off {
				return false, nil
			}
			continue
		}
		in, err := topo.Contains(cut, p)
		if err != nil || !in {
			return false, err
		}
	}
	return true, nil
}

// emit applies the emission rule: a new watermark only when the lower
// bound advances; its cut is joined with the previous one so that it
// never moves back. base fills the key ranges no position touches. safe
// is a cut at or after every position that may stand in for the covering
// cut when the topology cannot compute it (the committed cut, or the tail
// cut): a larger cut only makes the watermark's promise weaker.
func (c *core) emit(topo localstream.Topology, prev Watermark, k candidate, base, safe localstream.StreamCut) (Watermark, bool, error) {
	if !k.ok || (!prev.IsZero() && k.lower <= prev.LowerNs) {
		return prev, false, nil
	}
	cut, err := topo.Covering(base, k.positions...)
	if err != nil {
		// Positions are checked against topo and base is valid, so this is
		// localstream's internal error (see docs/watermark.md): a
		// position at the end of a merged predecessor with base inside the
		// merge successor. Fall back to the safe cut.
		c.stats.CoveringFallbacks++
		cut = safe
	}
	upper := max(k.upper, k.lower)
	if !prev.IsZero() {
		if cut, err = topo.Join(prev.Cut, cut); err != nil {
			return prev, false, err
		}
		upper = max(upper, prev.UpperNs)
	}
	return Watermark{LowerNs: k.lower, UpperNs: upper, Cut: cut}, true, nil
}
