package devices

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/edge-agent/edge-agent/localstream"
)

// shedNext sheds the first stream of the policy that may lose unreplicated
// data and still holds some. It reports whether it shed anything.
func (p *Pressure) shedNext(ctx context.Context) (bool, error) {
	for _, rule := range p.cfg.Policy {
		if !rule.AllowUnreplicated {
			continue
		}
		st, err := p.store.Stream(rule.Stream)
		if errors.Is(err, localstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		shed, err := p.shedStream(ctx, st)
		if shed || err != nil {
			return shed, err
		}
	}
	return false, nil
}

// shedStream drops the oldest ShedFraction of st's retained events (at
// least MinShedEvents) through localstream's Shed, which appends a gap
// marker per routing key that lost events. Older gap markers that fall in
// the range and are not yet replicated are appended again, so that no gap
// report is lost, whatever comes of the shed: done now, refused and
// finished later (FinishSheds, Open), or refused for good. It reports
// false when st holds nothing but such markers, or when the shed is
// refused before the head moved.
func (p *Pressure) shedStream(ctx context.Context, st *localstream.Stream) (bool, error) {
	topo := st.Topology()
	retained := retainedEvents(topo)
	if retained == 0 {
		return false, nil
	}
	n := max(uint64(p.cfg.MinShedEvents), uint64(math.Ceil(p.cfg.ShedFraction*float64(retained))))
	cut, carry, data, err := shedCut(st, topo, n)
	if err != nil || data == 0 {
		return false, err
	}
	// Carried markers are recorded before the shed deletes their originals
	// (but once: a copy may already wait for a refused shed, below).
	waiting := p.awaited(st)
	kept := make([]pendingMarker, 0, len(carry))
	for _, m := range carry {
		if !waiting[m.Position] {
			kept = append(kept, p.recordMarker(st, m))
		}
	}
	res, err := st.Shed(ctx, cut, ShedReason)
	p.count(st.Name(), func(s *StreamPressureStats) {
		s.Sheds++
		s.ShedEvents += res.Events
		s.ShedBytes += res.Bytes
		s.ShedUnreplicated += res.Unreplicated
		s.GapMarkers += uint64(len(res.Markers))
	})
	if err != nil {
		err = fmt.Errorf("devices: shed %s at %s: %w", st.Name(), cut, err)
		if le, lerr := st.Topology().LessEq(cut, st.HeadCut()); lerr != nil || !le {
			// Not deleted, or not all of it. The originals may go all
			// the same: a shed refused once recorded (ErrDiskFull, part
			// way or before its first piece) is finished by FinishSheds
			// or the next Open. The copies wait until the store has no
			// shed left to finish (retryMarkers).
			p.await(kept)
			return false, err
		}
		// Deleted, but a gap marker failed: localstream finishes it on Open.
	}
	for _, m := range kept {
		p.appendMarker(ctx, m, true)
	}
	return true, err
}

// shedCut reads from st's head until it has passed n events that are not
// unreplicated gap markers, and returns the cut after them, the
// unreplicated gap markers it passed, and the number of other events.
func shedCut(st *localstream.Stream, topo localstream.Topology, n uint64) (localstream.StreamCut, []localstream.Record, int, error) {
	cuts, err := st.CommittedCuts()
	if err != nil {
		return localstream.StreamCut{}, nil, 0, err
	}
	tail := topo.TailCut()
	r, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		return localstream.StreamCut{}, nil, 0, err
	}
	defer r.Close()
	var carry []localstream.Record
	data := 0
	for uint64(data) < n {
		rec, err := r.TryNext()
		if errors.Is(err, localstream.ErrEndOfCut) || errors.Is(err, localstream.ErrCaughtUp) {
			break
		}
		if err != nil {
			return localstream.StreamCut{}, nil, 0, err
		}
		if rec.Flags.Has(localstream.FlagGap) && !replicated(topo, cuts, rec.Position) {
			carry = append(carry, rec)
			continue
		}
		data++
	}
	return r.Cut(), carry, data, nil
}

// replicated reports whether every sink has committed pos (false with no sink).
func replicated(topo localstream.Topology, cuts map[string]localstream.StreamCut, pos localstream.Position) bool {
	if len(cuts) == 0 {
		return false
	}
	for _, c := range cuts {
		if in, err := topo.Contains(c, pos); err != nil || !in {
			return false
		}
	}
	return true
}
