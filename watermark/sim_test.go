package watermark

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/edge-agent/edge-agent/localstream"
)

// simStream is a hand-built stream topology for the core's tests: appends
// grow segment lengths, splits and merges seal segments and create
// successors exactly as the store does (pure splits and merges, a new epoch
// per scale). It keeps every appended event for the property checks.
type simStream struct {
	topo    localstream.Topology
	epoch   uint32
	nextNum uint32
	events  []simEvent
}

// simEvent is one appended event as the test remembers it.
type simEvent struct {
	pos    localstream.Position
	writer string
	t      int64
	late   bool
}

func newSimStream(name string, n int) *simStream {
	s := &simStream{topo: localstream.Topology{Stream: name, Segments: map[localstream.SegmentID]localstream.Segment{}}}
	for _, r := range localstream.SplitRange(localstream.KeyRange{Low: 0, High: 1}, n) {
		id := localstream.NewSegmentID(0, s.nextNum)
		s.nextNum++
		s.topo.Segments[id] = localstream.Segment{ID: id, Range: r}
	}
	return s
}

// snapshot returns a copy of the topology that later changes do not touch.
func (s *simStream) snapshot() localstream.Topology {
	return localstream.Topology{Stream: s.topo.Stream, Segments: maps.Clone(s.topo.Segments)}
}

// append places an event of key in its open segment and returns its position.
func (s *simStream) append(key string) localstream.Position {
	seg, ok := s.topo.SegmentFor(localstream.KeyHash(key))
	if !ok {
		panic("sim: no open segment for " + key)
	}
	p := localstream.Position{Segment: seg.ID, Offset: seg.Length}
	seg.Length++
	s.topo.Segments[seg.ID] = seg
	return p
}

// split replaces open segment id by n successors.
func (s *simStream) split(id localstream.SegmentID, n int) ([]localstream.SegmentID, error) {
	seg, ok := s.topo.Segments[id]
	if !ok || seg.Sealed {
		return nil, fmt.Errorf("sim: split of unknown or sealed %s", id)
	}
	s.epoch++
	var out []localstream.SegmentID
	for _, r := range localstream.SplitRange(seg.Range, n) {
		nid := localstream.NewSegmentID(s.epoch, s.nextNum)
		s.nextNum++
		s.topo.Segments[nid] = localstream.Segment{ID: nid, Range: r, Predecessors: []localstream.SegmentID{id}}
		out = append(out, nid)
	}
	seg.Sealed, seg.Successors = true, out
	s.topo.Segments[id] = seg
	return out, nil
}

// merge replaces adjacent open segments by one.
func (s *simStream) merge(ids ...localstream.SegmentID) (localstream.SegmentID, error) {
	var segs []localstream.Segment
	for _, id := range ids {
		seg, ok := s.topo.Segments[id]
		if !ok || seg.Sealed {
			return 0, fmt.Errorf("sim: merge of unknown or sealed %s", id)
		}
		segs = append(segs, seg)
	}
	slices.SortFunc(segs, func(a, b localstream.Segment) int { return cmp.Compare(a.Range.Low, b.Range.Low) })
	for i := 1; i < len(segs); i++ {
		if segs[i].Range.Low != segs[i-1].Range.High {
			return 0, fmt.Errorf("sim: %s and %s are not adjacent", segs[i-1].ID, segs[i].ID)
		}
	}
	s.epoch++
	nid := localstream.NewSegmentID(s.epoch, s.nextNum)
	s.nextNum++
	var preds []localstream.SegmentID
	for _, seg := range segs {
		preds = append(preds, seg.ID)
		seg.Sealed, seg.Successors = true, []localstream.SegmentID{nid}
		s.topo.Segments[seg.ID] = seg
	}
	s.topo.Segments[nid] = localstream.Segment{ID: nid, Range: localstream.KeyRange{Low: segs[0].Range.Low, High: segs[len(segs)-1].Range.High}, Predecessors: preds}
	return nid, nil
}
