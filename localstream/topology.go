package localstream

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Topology is a snapshot of a stream's segments, every segment ever created
// (sealed ones included), and the operations on stream cuts that need them:
// validation, comparison, least upper bound and containment.
//
// Scales are pure splits (one segment replaced by several covering its
// range) or pure merges (adjacent segments replaced by one covering their
// union). Under that rule the segments that contain one routing key form a
// chain ordered by epoch, each the successor of the one before; a cut is
// modelled internally as one position per elementary key interval on that
// interval's chain, which makes ≤ and the join pointwise.
//
// A Topology is a value; it is safe for concurrent reads.
type Topology struct {
	// Stream is the stream's name.
	Stream string
	// Segments holds every segment of the stream by id.
	Segments map[SegmentID]Segment
}

// Open returns the open (unsealed) segments in key order.
func (t Topology) Open() []Segment {
	var out []Segment
	for _, s := range t.Segments {
		if !s.Sealed {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Segment) int { return cmp.Compare(a.Range.Low, b.Range.Low) })
	return out
}

// SegmentFor returns the open segment whose range contains hash h.
func (t Topology) SegmentFor(h float64) (Segment, bool) {
	for _, s := range t.Segments {
		if !s.Sealed && s.Range.Contains(h) {
			return s, true
		}
	}
	return Segment{}, false
}

// TailCut is the cut after every durable event: the open segments at their lengths.
func (t Topology) TailCut() StreamCut {
	c := StreamCut{Stream: t.Stream, Positions: map[SegmentID]uint64{}}
	for _, s := range t.Open() {
		c.Positions[s.ID] = s.Length
	}
	return c
}

// OpenAtZero is the cut at the start of the newest segments: open segments at offset 0.
func (t Topology) OpenAtZero() StreamCut {
	c := StreamCut{Stream: t.Stream, Positions: map[SegmentID]uint64{}}
	for _, s := range t.Open() {
		c.Positions[s.ID] = 0
	}
	return c
}

// Validate checks that c belongs to this stream: known segments, offsets
// within their lengths, the key space covered exactly once, and no segment
// in the cut a predecessor (transitively) of another.
func (t Topology) Validate(c StreamCut) error {
	if c.Stream != t.Stream {
		return fmt.Errorf("%w: cut of stream %q used on stream %q", ErrForeignCut, c.Stream, t.Stream)
	}
	if len(c.Positions) == 0 {
		return fmt.Errorf("%w: empty cut", ErrForeignCut)
	}
	ranges := make([]KeyRange, 0, len(c.Positions))
	for id, off := range c.Positions {
		s, ok := t.Segments[id]
		if !ok {
			return fmt.Errorf("%w: unknown segment %s", ErrForeignCut, id)
		}
		if off > s.Length {
			return fmt.Errorf("%w: offset %d beyond segment %s length %d", ErrForeignCut, off, id, s.Length)
		}
		ranges = append(ranges, s.Range)
	}
	slices.SortFunc(ranges, func(a, b KeyRange) int { return cmp.Compare(a.Low, b.Low) })
	at := 0.0
	for _, r := range ranges {
		if r.Low != at {
			return fmt.Errorf("%w: key space not covered exactly once at %g (next range %s)", ErrForeignCut, at, r)
		}
		at = r.High
	}
	if at != 1 {
		return fmt.Errorf("%w: key space covered only up to %g", ErrForeignCut, at)
	}
	for id := range c.Positions {
		for anc := range t.ancestors(id) {
			if _, in := c.Positions[anc]; in {
				return fmt.Errorf("%w: segment %s and its predecessor %s both in cut", ErrForeignCut, id, anc)
			}
		}
	}
	return nil
}

// ancestors returns every transitive predecessor of id.
func (t Topology) ancestors(id SegmentID) map[SegmentID]struct{} {
	out := map[SegmentID]struct{}{}
	stack := slices.Clone(t.Segments[id].Predecessors)
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, seen := out[p]; seen {
			continue
		}
		out[p] = struct{}{}
		stack = append(stack, t.Segments[p].Predecessors...)
	}
	return out
}

// LessEq reports whether a ≤ b: for every routing key, a's position is at
// or before b's. Both cuts are validated.
func (t Topology) LessEq(a, b StreamCut) (bool, error) {
	m := t.model()
	pa, err := m.fromCut(a)
	if err != nil {
		return false, err
	}
	pb, err := m.fromCut(b)
	if err != nil {
		return false, err
	}
	for i := range pa {
		if pa[i].cmp(pb[i]) > 0 {
			return false, nil
		}
	}
	return true, nil
}

// Join returns the least upper bound of the cuts: for every routing key the
// later position. At least one cut is required.
func (t Topology) Join(cuts ...StreamCut) (StreamCut, error) {
	if len(cuts) == 0 {
		return StreamCut{}, fmt.Errorf("%w: join of no cuts", ErrForeignCut)
	}
	m := t.model()
	acc, err := m.fromCut(cuts[0])
	if err != nil {
		return StreamCut{}, err
	}
	for _, c := range cuts[1:] {
		p, err := m.fromCut(c)
		if err != nil {
			return StreamCut{}, err
		}
		for i := range acc {
			if p[i].cmp(acc[i]) > 0 {
				acc[i] = p[i]
			}
		}
	}
	m.close(acc)
	return m.toCut(acc)
}

// Covering returns the smallest cut that contains every given event
// position (each event is before the cut) and, on key ranges no position
// touches, equals base. Positions must name known segments.
func (t Topology) Covering(base StreamCut, positions ...Position) (StreamCut, error) {
	m := t.model()
	b, err := m.fromCut(base)
	if err != nil {
		return StreamCut{}, err
	}
	acc := make([]ipos, len(m.ivls))
	for _, p := range positions {
		s, ok := t.Segments[p.Segment]
		if !ok {
			return StreamCut{}, fmt.Errorf("%w: position in unknown segment %s", ErrForeignCut, p.Segment)
		}
		if p.Offset >= s.Length {
			return StreamCut{}, fmt.Errorf("%w: position %s beyond segment length %d", ErrForeignCut, p, s.Length)
		}
		for _, i := range m.segIvls[p.Segment] {
			m.raise(acc, i, ipos{idx: m.idx(i, p.Segment), off: p.Offset + 1, set: true})
		}
	}
	m.close(acc)
	for i := range acc {
		if !acc[i].set {
			acc[i] = b[i]
		}
	}
	m.close(acc)
	return m.toCut(acc)
}

// Contains reports whether the event at p is before cut c.
func (t Topology) Contains(c StreamCut, p Position) (bool, error) {
	m := t.model()
	pc, err := m.fromCut(c)
	if err != nil {
		return false, err
	}
	ivs, ok := m.segIvls[p.Segment]
	if !ok || len(ivs) == 0 {
		return false, fmt.Errorf("%w: position in unknown segment %s", ErrForeignCut, p.Segment)
	}
	i := ivs[0]
	return ipos{idx: m.idx(i, p.Segment), off: p.Offset}.cmp(pc[i]) < 0, nil
}

// ivl is an elementary key interval: no segment boundary falls inside it.
type ivl struct {
	lo, hi float64
	chain  []SegmentID // segments containing the interval, oldest first
}

// ipos is a position on one interval's chain.
type ipos struct {
	idx int    // index into the interval's chain
	off uint64 // offset in that segment
	set bool   // touched (Covering only)
}

func (p ipos) cmp(o ipos) int {
	if c := cmp.Compare(p.idx, o.idx); c != 0 {
		return c
	}
	return cmp.Compare(p.off, o.off)
}

// cutModel is the interval view of a topology.
type cutModel struct {
	t       Topology
	ivls    []ivl
	segIvls map[SegmentID][]int
}

func (t Topology) model() *cutModel {
	bounds := map[float64]struct{}{}
	for _, s := range t.Segments {
		bounds[s.Range.Low] = struct{}{}
		bounds[s.Range.High] = struct{}{}
	}
	bs := slices.Sorted(maps.Keys(bounds))
	m := &cutModel{t: t, segIvls: map[SegmentID][]int{}}
	ids := slices.Sorted(maps.Keys(t.Segments))
	for k := 0; k+1 < len(bs); k++ {
		iv := ivl{lo: bs[k], hi: bs[k+1]}
		for _, id := range ids {
			r := t.Segments[id].Range
			if r.Low <= iv.lo && iv.hi <= r.High {
				iv.chain = append(iv.chain, id)
			}
		}
		slices.SortFunc(iv.chain, func(a, b SegmentID) int { return cmp.Compare(a.Epoch(), b.Epoch()) })
		for _, id := range iv.chain {
			m.segIvls[id] = append(m.segIvls[id], len(m.ivls))
		}
		m.ivls = append(m.ivls, iv)
	}
	return m
}

// idx is the index of seg in interval i's chain.
func (m *cutModel) idx(i int, seg SegmentID) int { return slices.Index(m.ivls[i].chain, seg) }

// canon moves a position at the end of a sealed segment to the start of
// its successor on that interval.
func (m *cutModel) canon(i int, p ipos) ipos {
	ch := m.ivls[i].chain
	for p.idx+1 < len(ch) {
		s := m.t.Segments[ch[p.idx]]
		if !s.Sealed || p.off < s.Length {
			break
		}
		p = ipos{idx: p.idx + 1, set: p.set}
	}
	return p
}

func (m *cutModel) fromCut(c StreamCut) ([]ipos, error) {
	if err := m.t.Validate(c); err != nil {
		return nil, err
	}
	out := make([]ipos, len(m.ivls))
	for id, off := range c.Positions {
		for _, i := range m.segIvls[id] {
			out[i] = m.canon(i, ipos{idx: m.idx(i, id), off: off, set: true})
		}
	}
	return out, nil
}

// raise sets acc[i] to at least p.
func (m *cutModel) raise(acc []ipos, i int, p ipos) bool {
	p = m.canon(i, p)
	if acc[i].set && p.cmp(acc[i]) <= 0 {
		return false
	}
	acc[i] = p
	return true
}

// close applies the reading rules until nothing changes: a segment read
// up to an offset on one interval is read up to it on all of its intervals;
// a segment read past on one interval is exhausted on all of them; a
// segment read into means all of its predecessors are exhausted.
func (m *cutModel) close(acc []ipos) {
	for changed := true; changed; {
		changed = false
		for id, ivs := range m.segIvls {
			s := m.t.Segments[id]
			beyond, reading, maxOff := false, false, uint64(0)
			for _, i := range ivs {
				if !acc[i].set {
					continue
				}
				k := m.idx(i, id)
				if acc[i].idx > k {
					beyond, reading = true, true
				} else if acc[i].idx == k && acc[i].off > 0 {
					reading = true
					maxOff = max(maxOff, acc[i].off)
				}
			}
			if maxOff > 0 {
				// An offset in a segment holds for all of its keys.
				for _, i := range ivs {
					changed = m.raise(acc, i, ipos{idx: m.idx(i, id), off: maxOff, set: true}) || changed
				}
			}
			if beyond {
				for _, i := range ivs {
					changed = m.raise(acc, i, ipos{idx: m.idx(i, id), off: s.Length, set: true}) || changed
				}
			}
			if reading {
				for _, p := range s.Predecessors {
					ps := m.t.Segments[p]
					for _, i := range m.segIvls[p] {
						changed = m.raise(acc, i, ipos{idx: m.idx(i, p), off: ps.Length, set: true}) || changed
					}
				}
			}
		}
	}
}

func (m *cutModel) toCut(acc []ipos) (StreamCut, error) {
	rep := make([]ipos, len(acc))
	for i, p := range acc {
		rep[i] = p
		if p.off != 0 || p.idx == 0 {
			continue
		}
		id := m.ivls[i].chain[p.idx]
		for _, j := range m.segIvls[id] {
			if acc[j].idx < m.idx(j, id) {
				// The successor is not reached on all its intervals (a
				// merge whose other predecessor is not exhausted): stay
				// at the end of this interval's predecessor.
				prev := m.ivls[i].chain[p.idx-1]
				rep[i] = ipos{idx: p.idx - 1, off: m.t.Segments[prev].Length, set: true}
				break
			}
		}
	}
	c := StreamCut{Stream: m.t.Stream, Positions: map[SegmentID]uint64{}}
	for i, p := range rep {
		id := m.ivls[i].chain[p.idx]
		if off, ok := c.Positions[id]; ok && off != p.off {
			return StreamCut{}, fmt.Errorf("localstream: internal: segment %s at offsets %d and %d", id, off, p.off)
		}
		c.Positions[id] = p.off
	}
	if err := m.t.Validate(c); err != nil {
		return StreamCut{}, fmt.Errorf("localstream: internal: joined cut invalid: %w", err)
	}
	return c, nil
}
