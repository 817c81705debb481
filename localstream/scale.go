package localstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Split seals seg and replaces it by n segments of equal parts of its
// range, in a new epoch. Appends continue: those queued before the split
// land in seg, those after in the successors. It returns the new segments.
func (st *Stream) Split(seg SegmentID, n int) ([]SegmentID, error) {
	if n < 2 {
		return nil, fmt.Errorf("%w: split into %d parts", ErrInvalidScale, n)
	}
	var out []SegmentID
	err := st.s.control(context.Background(), func() error {
		sg, ok := st.segs[seg]
		if !ok {
			return fmt.Errorf("%w: unknown segment %s", ErrInvalidScale, seg)
		}
		var err error
		out, err = st.scaleLocked([]SegmentID{seg}, SplitRange(sg.Range, n))
		return err
	})
	return out, err
}

// Merge seals adjacent open segments and replaces them by one covering
// their union, in a new epoch.
func (st *Stream) Merge(segs ...SegmentID) (SegmentID, error) {
	if len(segs) < 2 {
		return 0, fmt.Errorf("%w: merge of %d segments", ErrInvalidScale, len(segs))
	}
	var out []SegmentID
	err := st.s.control(context.Background(), func() error {
		lo, hi := 1.0, 0.0
		for _, id := range segs {
			sg, ok := st.segs[id]
			if !ok {
				return fmt.Errorf("%w: unknown segment %s", ErrInvalidScale, id)
			}
			lo, hi = min(lo, sg.Range.Low), max(hi, sg.Range.High)
		}
		var err error
		out, err = st.scaleLocked(segs, []KeyRange{{lo, hi}})
		return err
	})
	if err != nil {
		return 0, err
	}
	return out[0], nil
}

// scaleLocked seals the given open segments and creates successors with
// the given ranges. It runs in the committer goroutine, between batches, so
// every offset of the sealed segments is already assigned: their final
// length is known and no later event can land in them.
func (st *Stream) scaleLocked(seal []SegmentID, ranges []KeyRange) ([]SegmentID, error) {
	if len(seal) != 1 && len(ranges) != 1 {
		return nil, fmt.Errorf("%w: only splits (1 → n) and merges (n → 1) are allowed", ErrInvalidScale)
	}
	old := make([]*segState, 0, len(seal))
	for _, id := range seal {
		sg := st.segs[id]
		if sg.Sealed {
			return nil, fmt.Errorf("%w: %s", ErrSealed, id)
		}
		if slices.Contains(old, sg) {
			return nil, fmt.Errorf("%w: segment %s twice", ErrInvalidScale, id)
		}
		old = append(old, sg)
	}
	slices.SortFunc(old, func(a, b *segState) int { return cmp.Compare(a.Range.Low, b.Range.Low) })
	for i := 1; i < len(old); i++ {
		if old[i-1].Range.High != old[i].Range.Low {
			return nil, fmt.Errorf("%w: segments %s and %s are not adjacent", ErrInvalidScale, old[i-1].ID, old[i].ID)
		}
	}
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b KeyRange) int { return cmp.Compare(a.Low, b.Low) })
	at := old[0].Range.Low
	for _, r := range rs {
		if !validRange(r) || r.Low != at {
			return nil, fmt.Errorf("%w: new ranges do not tile %s..%s at %g", ErrInvalidScale,
				old[0].Range, old[len(old)-1].Range, at)
		}
		at = r.High
	}
	if at != old[len(old)-1].Range.High {
		return nil, fmt.Errorf("%w: new ranges end at %g, sealed ones at %g", ErrInvalidScale, at, old[len(old)-1].Range.High)
	}

	// Seal only what is durable: wait for the commits in flight that hold
	// events of these segments, so that a sealed segment's length is its
	// final length in every snapshot (a cut at its end then means all of it).
	for {
		ch := st.changed()
		st.mu.RLock()
		pending := false
		for _, sg := range old {
			pending = pending || sg.Length < sg.assigned
		}
		st.mu.RUnlock()
		if !pending {
			break
		}
		if err := st.s.Err(); err != nil {
			return nil, err
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Millisecond):
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	epoch := st.meta.Epoch + 1
	var created []SegmentID
	preds := make([]SegmentID, len(old))
	for i, sg := range old {
		preds[i] = sg.ID
	}
	for _, r := range rs {
		id := NewSegmentID(epoch, st.meta.NextNumber)
		st.meta.NextNumber++
		st.segs[id] = &segState{Segment: Segment{ID: id, Range: r, Predecessors: slices.Clone(preds)}}
		created = append(created, id)
	}
	for _, sg := range old {
		sg.Sealed = true
		sg.final = sg.assigned
		sg.Successors = slices.Clone(created)
	}
	st.meta.Epoch = epoch
	st.meta.LastScale = st.s.opts.Now()
	st.rebuildOpen()
	// The metadata commit is queued behind every data commit of the sealed
	// segments, so after a crash the seal is never ahead of their data.
	done := make(chan error, 1)
	txn := st.s.db.NewTransaction(true)
	if err := st.putMeta(txn); err != nil {
		txn.Discard()
		st.s.setSticky(err)
		return nil, err
	}
	txn.CommitWith(func(err error) { done <- err })
	if err := <-done; err != nil {
		st.s.setSticky(err)
		return nil, err
	}
	st.stats.Scales++
	st.broadcast()
	st.s.log.Debug("localstream: scaled", "stream", st.name, "sealed", preds, "created", created)
	return created, nil
}

// maybeAutoScale applies the stream's rate policy at the end of a rate
// window. Committer goroutine only.
func (st *Stream) maybeAutoScale(now time.Time) {
	p := st.meta.Config.Scaling
	if p.Type != ScaleByEventRate && p.Type != ScaleByDataRate {
		return
	}
	if st.winStart.IsZero() {
		st.winStart = now
		return
	}
	win := now.Sub(st.winStart)
	if win < p.Window {
		return
	}
	rate := func(sg *segState) float64 {
		v := sg.winEvents
		if p.Type == ScaleByDataRate {
			v = sg.winBytes
		}
		return float64(v) / win.Seconds()
	}
	defer func() {
		st.winStart = now
		for _, sg := range st.open {
			sg.winEvents, sg.winBytes = 0, 0
		}
	}()
	if now.Sub(st.meta.LastScale) < p.Cooldown {
		return
	}
	open := slices.Clone(st.open)
	for _, sg := range open {
		if rate(sg) > p.TargetRate && len(open)+p.Factor-1 <= p.MaxSegments {
			if _, err := st.scaleLocked([]SegmentID{sg.ID}, SplitRange(sg.Range, p.Factor)); err != nil {
				st.s.log.Warn("localstream: auto split failed", "stream", st.name, "segment", sg.ID, "err", err)
			}
			return
		}
	}
	for i := 0; i+1 < len(open) && len(open) > p.MinSegments; i++ {
		a, b := open[i], open[i+1]
		if rate(a)+rate(b) < p.TargetRate/float64(p.Factor) {
			r := KeyRange{a.Range.Low, b.Range.High}
			if _, err := st.scaleLocked([]SegmentID{a.ID, b.ID}, []KeyRange{r}); err != nil {
				st.s.log.Warn("localstream: auto merge failed", "stream", st.name, "err", err)
			}
			return
		}
	}
}
