package watermark

import (
	"maps"
	"math"
	"slices"

	"github.com/edge-agent/edge-agent/localstream"
)

// This file is the core's side of persistence: records out of dirty
// writers, writers back from records. The Tracker does the I/O.

// recordOf returns the persisted form of w.
func recordOf(w *writer) writerRecord {
	return writerRecord{
		closed: w.closed, hasMark: w.hasMark,
		noted: w.noted, maxSeen: w.maxSeen, lastActive: w.lastActive, floor: w.floor,
		pos: w.pos, base: w.base,
	}
}

// takeDirty returns the records of the dirty writers among ids (all
// writers if none given) and clears their flags. Call putBackDirty for
// those whose write failed.
func (c *core) takeDirty(ids ...string) map[string]writerRecord {
	out := map[string]writerRecord{}
	take := func(id string, w *writer) {
		if w != nil && w.dirty {
			out[id] = recordOf(w)
			w.dirty = false
		}
	}
	if len(ids) > 0 {
		for _, id := range ids {
			take(id, c.writers[id])
		}
		return out
	}
	for id, w := range c.writers {
		take(id, w)
	}
	return out
}

// putBackDirty marks writers dirty again after a failed write.
func (c *core) putBackDirty(ids []string) {
	for _, id := range ids {
		if w, ok := c.writers[id]; ok {
			w.dirty = true
		}
	}
}

// restore installs writer id from its record. Positions that topo does not
// hold (unknown segment, or beyond a durable length: possible after a power
// cut in periodic durability mode) are dropped; dropping a position only
// makes cuts smaller, which is the safe side. It reports how many positions
// it dropped.
func (c *core) restore(topo localstream.Topology, id string, r writerRecord) int {
	dropped := 0
	keep := func(ps []localstream.Position) []localstream.Position {
		var out []localstream.Position
		for _, p := range ps {
			if validPosition(topo, p) {
				out = append(out, p)
			} else {
				dropped++
			}
		}
		return out
	}
	w := &writer{
		id: id, closed: r.closed, hasMark: r.hasMark,
		noted: r.noted, maxSeen: r.maxSeen, lastActive: r.lastActive, floor: r.floor,
		pos: keep(r.pos), admitted: math.MinInt64,
	}
	if r.hasMark {
		// Marks are bounded times: the highest noted is the highest
		// admitted that reached the store, and the next marks start there.
		w.admitted = r.maxSeen
	}
	if r.base != nil {
		w.base = &mark{t: r.base.t, pos: keep(r.base.pos)}
	}
	if w.hasMark && (w.base == nil || w.base.t != w.noted || !slices.Equal(w.base.pos, w.pos)) {
		// Marks between base and the latest are lost with the restart; the
		// latest stands for them (the committed view then uses the base
		// until the latest is committed).
		w.hist = []mark{{t: w.noted, pos: w.pos}}
	}
	c.writers[id] = w
	return dropped
}

// validPosition reports whether topo holds a durable event at p.
func validPosition(topo localstream.Topology, p localstream.Position) bool {
	s, ok := topo.Segments[p.Segment]
	return ok && p.Offset < s.Length
}

// restoreWatermarks installs the persisted published watermarks that
// still fit topo.
func (c *core) restoreWatermarks(topo localstream.Topology, local, committed []Watermark, pruned bool) {
	for _, w := range local {
		if topo.Validate(w.Cut) == nil {
			c.local = w
		}
	}
	c.results, c.pruned = nil, pruned
	for _, w := range committed {
		if topo.Validate(w.Cut) == nil {
			c.results = append(c.results, w)
		} else {
			c.pruned = true
		}
	}
}

// writerIDs returns the known writer ids in order.
func (c *core) writerIDs() []string { return slices.Sorted(maps.Keys(c.writers)) }

// holdUntil makes the core treat every event up to tail (the stream's tail
// when the state was loaded) as of unknown writer and time: see
// core.restartTail.
func (c *core) holdUntil(tail localstream.StreamCut) {
	c.restartTail, c.localHold, c.committedHold = tail, true, true
}
