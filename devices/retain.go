package devices

import (
	"errors"
	"fmt"

	"github.com/edge-agent/edge-agent/localstream"
)

// retain truncates st to the committed cut that is at or before every
// sink's committed cut, and returns the number of events deleted. A stream
// no sink has committed is left alone.
func (p *Pressure) retain(st *localstream.Stream) (uint64, error) {
	cuts, err := st.CommittedCuts()
	if err != nil || len(cuts) == 0 {
		return 0, err
	}
	topo := st.Topology()
	c, ok := lowestCut(topo, cuts)
	if !ok {
		p.mu.Lock()
		p.stats.RetainSkipped++
		p.mu.Unlock()
		return 0, nil
	}
	if le, err := topo.LessEq(c, st.HeadCut()); err != nil || le {
		return 0, err // nothing replicated beyond the head
	}
	before := retainedStart(topo)
	if err := st.Truncate(c); err != nil {
		if errors.Is(err, localstream.ErrNotReplicated) {
			return 0, nil // a sink moved back (reset): not ours to fix
		}
		return 0, fmt.Errorf("devices: retain %s at %s: %w", st.Name(), c, err)
	}
	n := retainedStart(st.Topology()) - before
	p.count(st.Name(), func(s *StreamPressureStats) { s.TruncatedEvents += n })
	return n, nil
}

// lowestCut returns the committed cut at or before all the others, if the
// cuts are ordered that way (with one sink, its cut).
func lowestCut(topo localstream.Topology, cuts map[string]localstream.StreamCut) (localstream.StreamCut, bool) {
	for _, c := range cuts {
		lowest := true
		for _, o := range cuts {
			if le, err := topo.LessEq(c, o); err != nil || !le {
				lowest = false
				break
			}
		}
		if lowest {
			return c, true
		}
	}
	return localstream.StreamCut{}, false
}

// retainedStart sums the first retained offset of every segment: it grows
// by the number of events deleted from the head.
func retainedStart(topo localstream.Topology) uint64 {
	var n uint64
	for _, s := range topo.Segments {
		n += s.Start
	}
	return n
}

// retainedEvents counts the events still stored.
func retainedEvents(topo localstream.Topology) uint64 {
	var n uint64
	for _, s := range topo.Segments {
		if s.Length > s.Start {
			n += s.Length - s.Start
		}
	}
	return n
}
