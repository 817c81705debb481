package watermark

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/edge-agent/edge-agent/localstream"
)

// maxHistory bounds the marks a writer keeps that are not yet inside the
// committed cut. When the uplink is down for long, the history fills; it is
// then thinned evenly over its whole span (see record), so the kept marks
// are at most a step apart wherever they lie in the backlog, the oldest as
// much as the newest. Dropping a mark is always safe: the committed view
// then uses an older mark (earlier time, smaller cut).
const maxHistory = 1024

// mark is what a writer noted: a time and the positions it had reached.
type mark struct {
	// t is the noted time, Unix ns: all later events of the writer are at
	// or after t (late ones excepted).
	t int64
	// pos holds the writer's latest durable position in each segment it
	// wrote to, segments that are predecessors of another entry pruned.
	// Writers of one routing key have exactly one entry.
	pos []localstream.Position
	// behindOnly is set when every event this mark stands for (since the
	// previous mark kept) was admitted behind the receiving clock, so late:
	// the committed view need not count the writer for it.
	behindOnly bool
}

// writer is the state of one writer. Guarded by the core's owner.
type writer struct {
	// id is the stable writer id.
	id string
	// hasMark is true once the writer noted time (now or before a restart).
	hasMark bool
	// noted is the writer's current noted time (valid if hasMark).
	noted int64
	// maxSeen is the highest event time noted (noted = maxSeen - lateness).
	maxSeen int64
	// pos is the writer's current positions (those of its latest mark).
	pos []localstream.Position
	// floor bounds from below the time of every event of the writer that
	// is not inside any committed cut yet, when it has no committed mark
	// (base == nil): the lower of its first mark's time and the time
	// admitted in flight before it (the first event's; a video chunk
	// notes its last frame but is dated by its first).
	floor int64
	// base is the writer's newest mark inside every committed cut still
	// accepted (the oldest kept result's cut); nil if none.
	base *mark
	// hist holds marks newer than base, oldest first, at most maxHistory.
	hist []mark
	// step is the thinning grid in ns, a power of two (0: keep every
	// mark, until the history first fills). Of the marks in one interval
	// [k·step, (k+1)·step) only the first is kept, and the newest mark.
	step int64
	// lastActive is when the writer last noted or asked Late, Unix ns.
	lastActive int64
	// closed is set by CloseWriter and cleared when the writer returns.
	closed bool
	// inflight is set when Late answered "not late": the event is being
	// appended. Until its Note (or the writer's next Late, or its close)
	// the writer stays active, and a writer with no mark yet holds the
	// watermark at the event's time inflightT. inflightSince bounds the
	// hold to inflightHold idle timeouts.
	inflight      bool
	inflightT     int64
	inflightSince int64
	// dirty is set when the persisted record is out of date.
	dirty bool
	// admitted is the highest mark admitted (Admission.Mark), so that the
	// next admission's marks do not go back. In memory only.
	admitted int64
	// behind is set while the writer's latest admitted event was behind
	// the receiving clock: it does not hold the watermark back.
	behind bool
	// skewAhead and skewBehind count its events admitted out of the
	// receiving clock's bounds. In memory only.
	skewAhead, skewBehind uint64
}

// inflightHold is how many idle timeouts an event in flight (Late asked,
// Note not yet) keeps its writer active: an append slower than that may
// land behind the watermark without the late flag.
const inflightHold = 10

// active reports whether w holds the watermark back at time now. An event
// in flight holds it even past a close or the idle timeout: the event is
// not flagged late, so the watermark must not pass it.
func (w *writer) active(now, idleNs int64) bool {
	switch {
	case w.inflight && (idleNs <= 0 || now-w.inflightSince < inflightHold*idleNs):
		return true
	case w.closed:
		return false
	}
	return idleNs <= 0 || now-w.lastActive < idleNs
}

// holds reports whether w holds the watermark back at time now: active
// and not behind the receiving clock (unless an event is in flight).
func (w *writer) holds(now, idleNs int64) bool {
	return w.active(now, idleNs) && (!w.behind || w.inflight)
}

// checkPosition reports ErrPositionNotAdvancing if p is not after the
// writer's positions. Ancestry comes from topo's predecessor links.
func (w *writer) checkPosition(topo localstream.Topology, p localstream.Position) error {
	for _, q := range w.pos {
		if q.Segment == p.Segment {
			if p.Offset <= q.Offset {
				return fmt.Errorf("%w: writer %q at %s, noted %s before", ErrPositionNotAdvancing, w.id, p, q)
			}
			continue
		}
		if isAncestor(topo, p.Segment, q.Segment) {
			return fmt.Errorf("%w: writer %q at %s in a predecessor of %s noted before", ErrPositionNotAdvancing, w.id, p, q)
		}
	}
	return nil
}

// advance sets p as the writer's position in its segment, dropping entries
// in segments that are predecessors of p's.
func (w *writer) advance(topo localstream.Topology, p localstream.Position) {
	out := make([]localstream.Position, 0, len(w.pos)+1)
	for _, q := range w.pos {
		if q.Segment == p.Segment || isAncestor(topo, q.Segment, p.Segment) {
			continue
		}
		out = append(out, q)
	}
	out = append(out, p)
	slices.SortFunc(out, func(a, b localstream.Position) int {
		switch {
		case a.Segment < b.Segment:
			return -1
		case a.Segment > b.Segment:
			return 1
		}
		return 0
	})
	w.pos = out
}

// record appends the current (noted, pos) to the history, thinning it
// when full. behind is set for a mark of an event admitted behind the
// receiving clock. It returns how many marks it dropped.
//
// The history is kept evenly over its span on a grid of step ns: of the
// marks in one grid interval only the first is kept, and the newest mark
// (which the next one replaces while they share an interval). When the
// history is full the grid becomes the smallest power of two of at least
// 2 × span / maxHistory (span: newest minus oldest mark's time), which
// leaves at most maxHistory/2 + 3 marks. The grids nest, so every mark
// ever dropped has a kept mark before it in its interval: less than step
// before it, step < 4 × (the largest span the history had) / maxHistory.
// A committed watermark's lower, the newest kept mark inside its cut, is
// so less than that behind the writer's newest event inside the cut
// (docs/watermark.md). Appends cost O(1) amortised: a thinning,
// O(maxHistory), follows at least maxHistory/2 appends.
func (w *writer) record(behind bool) int {
	m := mark{t: w.noted, pos: w.pos, behindOnly: behind}
	dropped := 0
	if n := len(w.hist); n >= 2 && w.sameCell(w.hist[n-2].t, w.hist[n-1].t) {
		// The newest mark was kept only for being the newest: m stands
		// for it now.
		m.behindOnly = m.behindOnly && w.hist[n-1].behindOnly
		w.hist = w.hist[:n-1]
		dropped++
	}
	w.hist = append(w.hist, m)
	if len(w.hist) <= maxHistory {
		return dropped
	}
	n := len(w.hist)
	need := uint64((2*(w.hist[n-1].t-w.hist[0].t) + maxHistory - 1) / maxHistory)
	w.step = 1 << bits.Len64(max(need, 1)-1)
	// In place: the i-th mark is read before anything is written at or
	// after len(kept) <= i, so the array is reused (no allocation, and no
	// regrowth of a thinned one at the next append).
	kept := w.hist[:1]
	allBehind := true // every mark dropped since the last kept is behindOnly
	for i := 1; i < n; i++ {
		m := w.hist[i]
		if i < n-1 && w.sameCell(kept[len(kept)-1].t, m.t) {
			allBehind = allBehind && m.behindOnly
			continue
		}
		m.behindOnly = m.behindOnly && allBehind
		allBehind = true
		kept = append(kept, m)
	}
	dropped += n - len(kept)
	w.hist = kept
	return dropped
}

// sameCell reports whether times a and b lie in one interval of the
// writer's thinning grid (never, before the history first filled).
func (w *writer) sameCell(a, b int64) bool {
	if w.step == 0 {
		return false
	}
	shift := bits.TrailingZeros64(uint64(w.step))
	return a>>shift == b>>shift
}

// isAncestor reports whether a is a (transitive) predecessor of b.
func isAncestor(topo localstream.Topology, a, b localstream.SegmentID) bool {
	if a == b {
		return false
	}
	// Ancestors are in older epochs; the walk is short (one chain per scale).
	stack := slices.Clone(topo.Segments[b].Predecessors)
	seen := map[localstream.SegmentID]bool{}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s == a {
			return true
		}
		if seen[s] || s.Epoch() < a.Epoch() {
			continue
		}
		seen[s] = true
		stack = append(stack, topo.Segments[s].Predecessors...)
	}
	return false
}
