package localstream

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Truncate deletes every event before cut c. It refuses (ErrNotReplicated)
// when c is not at or before the committed cut of every sink: data is
// deleted only once replicated. With no sink registered nothing was
// replicated, so it refuses too; use Shed to drop data by policy.
func (st *Stream) Truncate(c StreamCut) error {
	cuts, err := st.CommittedCuts()
	if err != nil {
		return err
	}
	topo := st.Topology()
	if err := topo.Validate(c); err != nil {
		return err
	}
	if len(cuts) == 0 {
		return fmt.Errorf("%w: no sink has committed stream %q", ErrNotReplicated, st.name)
	}
	for sink, cc := range cuts {
		le, err := topo.LessEq(c, cc)
		if err != nil {
			return fmt.Errorf("committed cut of %q: %w", sink, err)
		}
		if !le {
			return fmt.Errorf("%w: %s is beyond %q's committed cut %s", ErrNotReplicated, c, sink, cc)
		}
	}
	_, err = st.deleteBefore(c, false)
	return err
}

// ShedResult says what Shed dropped.
type ShedResult struct {
	// Events and Bytes count the dropped events and their payload bytes.
	Events, Bytes uint64
	// Unreplicated counts dropped events that some sink had not committed.
	Unreplicated uint64
	// Keys holds a gap summary per routing key.
	Keys map[string]*Gap
	// Markers are the positions of the gap markers appended.
	Markers []Position
}

// Gap is the payload of a gap marker (JSON): what was dropped for one routing key.
type Gap struct {
	Reason       string   `json:"reason"`
	Events       uint64   `json:"events"`
	Bytes        uint64   `json:"bytes"`
	From         Position `json:"from"`
	To           Position `json:"to"`
	FirstTimeNs  int64    `json:"first_event_time_ns"`
	LastTimeNs   int64    `json:"last_event_time_ns"`
	Unreplicated uint64   `json:"unreplicated"`
}

// ShedWriter is the writer id of gap markers.
const ShedWriter = "localstream/shed"

// Shed drops every event before cut c by policy, whether replicated or not
// (disk pressure), and appends one gap marker per routing key that lost
// events (Flags FlagGap, payload a JSON Gap), so that the loss is explicit
// and replicated. It returns what was dropped.
func (st *Stream) Shed(ctx context.Context, c StreamCut, reason string) (ShedResult, error) {
	if err := st.Topology().Validate(c); err != nil {
		return ShedResult{}, err
	}
	res, err := st.deleteBefore(c, true)
	if err != nil {
		return res, err
	}
	for _, key := range slices.Sorted(maps.Keys(res.Keys)) {
		g := res.Keys[key]
		g.Reason = reason
		payload, _ := json.Marshal(g)
		pos, err := st.Append(ctx, Event{RoutingKey: key, Writer: ShedWriter, IngestTime: st.s.opts.Now().UnixNano(),
			Flags: FlagGap, ContentType: "application/json", Payload: payload})
		if err != nil {
			return res, fmt.Errorf("localstream: gap marker for %q: %w", key, err)
		}
		res.Markers = append(res.Markers, pos)
	}
	st.mu.Lock()
	st.stats.ShedEvents += res.Events
	st.stats.ShedBytes += res.Bytes
	if st.meta.Shed == nil {
		st.meta.Shed = map[string]shedTotals{}
	}
	t := st.meta.Shed[reason]
	t.Events += res.Events
	t.Bytes += res.Bytes
	st.meta.Shed[reason] = t
	st.mu.Unlock()
	return res, st.s.control(ctx, func() error {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.s.db.Update(st.putMeta)
	})
}

// deleteBefore deletes events before c and moves the head cut. With
// summarize it decodes what it deletes into per-key gap summaries.
func (st *Stream) deleteBefore(c StreamCut, summarize bool) (ShedResult, error) {
	res := ShedResult{Keys: map[string]*Gap{}}
	var committed []StreamCut
	if summarize {
		cuts, err := st.CommittedCuts()
		if err != nil {
			return res, err
		}
		committed = slices.Collect(maps.Values(cuts))
	}
	err := st.s.control(context.Background(), func() error {
		st.mu.Lock()
		topo := st.topologyLocked()
		ranges := map[SegmentID][2]uint64{}
		for id := range c.Positions {
			ranges[id] = [2]uint64{st.segs[id].Start, c.Positions[id]}
			for anc := range topo.ancestors(id) {
				ranges[anc] = [2]uint64{st.segs[anc].Start, st.segs[anc].final}
			}
		}
		st.mu.Unlock()
		wb := st.s.db.NewWriteBatch()
		defer wb.Cancel()
		for id, r := range ranges {
			if r[0] >= r[1] {
				continue
			}
			if err := st.deleteRange(wb, topo, id, r[0], r[1], summarize, committed, &res); err != nil {
				return err
			}
		}
		if err := wb.Flush(); err != nil {
			st.s.setSticky(err)
			return err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		for id, r := range ranges {
			st.segs[id].Start = max(st.segs[id].Start, r[1])
		}
		head := StreamCut{Stream: st.name, Positions: st.meta.Head}
		if j, err := topo.Join(head, c); err == nil {
			st.meta.Head = j.Positions
		} else {
			st.meta.Head = maps.Clone(c.Positions)
		}
		err := st.s.db.Update(st.putMeta)
		if err != nil {
			st.s.setSticky(err)
		}
		st.broadcast()
		return err
	})
	return res, err
}

// deleteRange deletes offsets [from, to) of one segment.
func (st *Stream) deleteRange(wb *badger.WriteBatch, topo Topology, id SegmentID, from, to uint64,
	summarize bool, committed []StreamCut, res *ShedResult) error {
	prefix := segmentPrefix(st.name, id)
	return st.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: summarize})
		defer it.Close()
		for it.Seek(dataKey(st.name, id, from)); it.ValidForPrefix(prefix); it.Next() {
			off := offsetOf(it.Item().Key())
			if off >= to {
				break
			}
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
			if !summarize {
				continue
			}
			var ev Event
			if err := it.Item().Value(func(b []byte) (err error) { ev, err = decodeRecord(b); return err }); err != nil {
				return err
			}
			pos := Position{Segment: id, Offset: off}
			g := res.Keys[ev.RoutingKey]
			if g == nil {
				g = &Gap{From: pos, FirstTimeNs: ev.EventTime}
				res.Keys[ev.RoutingKey] = g
			}
			g.Events++
			g.Bytes += uint64(len(ev.Payload))
			g.To = pos
			g.LastTimeNs = ev.EventTime
			res.Events++
			res.Bytes += uint64(len(ev.Payload))
			if len(committed) == 0 {
				g.Unreplicated++
				res.Unreplicated++
			}
			for _, cc := range committed {
				if in, err := topo.Contains(cc, pos); err == nil && !in {
					g.Unreplicated++
					res.Unreplicated++
					break
				}
			}
		}
		return nil
	})
}
