package watermark

import (
	"errors"
	"fmt"
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
)

// TestCommittedAcrossMergeOfSplitSuccessor: a mark on the last event of a
// split successor that was then merged, with the committed cut inside the
// merge successor on a key range no mark touches (its first event is a
// gap marker, which no writer notes). localstream's Covering once failed on
// this input; the watermark must come out valid, at or before the
// committed cut, and containing the marks.
func TestCommittedAcrossMergeOfSplitSuccessor(t *testing.T) {
	sim := newSimStream("video", 2) // 0.0 [0,.5), 0.1 [.5,1)
	c := newCore("video", coreConfig{})
	now := int64(1)
	note := func(w, key string, tm int64) localstream.Position {
		if c.late(w, tm, now) {
			t.Fatalf("%s at %d late", w, tm)
		}
		p := sim.append(key)
		if err := c.note(sim.snapshot(), w, tm, p, now); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i := range 3 {
		note("high", "kilo", int64(100+i)) // 0.1
	}
	ids, err := sim.split(localstream.NewSegmentID(0, 1), 2) // 1.2 [.5,.75), 1.3 [.75,1)
	if err != nil {
		t.Fatal(err)
	}
	mid := note("mid", "tango", 200) // 0.678: 1.2@0, its last event
	if mid.Segment != ids[0] {
		t.Fatalf("tango landed in %s, want %s", mid, ids[0])
	}
	m, err := sim.merge(localstream.NewSegmentID(0, 0), ids[0]) // 2.4 [0,.75)
	if err != nil {
		t.Fatal(err)
	}
	gap := sim.append("papa") // 2.4@0: a gap marker, not noted
	note("high", "kilo", 300) // 1.3@0
	cut := localstream.StreamCut{Stream: "video", Positions: map[localstream.SegmentID]uint64{m: 1, ids[1]: 0}}
	topo := sim.snapshot()
	w, err := c.committedAt(topo, cut, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Validate(w.Cut); err != nil {
		t.Fatal(err)
	}
	if le, err := topo.LessEq(w.Cut, cut); err != nil || !le {
		t.Fatalf("watermark cut %s passes committed cut %s", w.Cut, cut)
	}
	for _, p := range []localstream.Position{mid, {Segment: localstream.NewSegmentID(0, 1), Offset: 2}} {
		if in, err := topo.Contains(w.Cut, p); err != nil || !in {
			t.Fatalf("watermark cut %s misses the mark at %s", w.Cut, p)
		}
	}
	// high's mark at 0.1@2 (t=102) and mid's at 1.2@0 (t=200) are inside;
	// high's at 1.3@0 is not.
	if w.LowerNs != 102 || w.UpperNs != 200 {
		t.Fatalf("watermark %s, want lower 102 upper 200", w)
	}
	t.Logf("gap marker at %s; watermark %s (Covering fallbacks: %d)", gap, w, c.stats.CoveringFallbacks)
}

// TestHistoryThinning: with the committed cut stuck, a writer's history
// stays bounded, thinning is counted, and the committed watermark still
// uses a mark inside the cut once it moves.
func TestHistoryThinning(t *testing.T) {
	sim := newSimStream("video", 1)
	c := newCore("video", coreConfig{})
	first := sim.snapshot().OpenAtZero()
	n := 3 * maxHistory
	for i := range n {
		p := sim.append("papa")
		if err := c.note(sim.snapshot(), "w", int64(i), p, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(c.writers["w"].hist); got > maxHistory {
		t.Fatalf("history holds %d marks, bound %d", got, maxHistory)
	}
	if c.stats.HistoryThinned == 0 {
		t.Fatal("no thinning counted")
	}
	topo := sim.snapshot()
	if _, err := c.committedAt(topo, first, 1); err != nil {
		t.Fatal(err)
	}
	half := localstream.StreamCut{Stream: "video", Positions: map[localstream.SegmentID]uint64{localstream.NewSegmentID(0, 0): uint64(n / 2)}}
	w, err := c.committedAt(topo, half, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The kept mark nearest below the cut: at most the thinning stride back.
	if w.LowerNs > int64(n/2-1) || w.LowerNs < int64(n/2-1-8) {
		t.Fatalf("committed lower %d, want just below %d", w.LowerNs, n/2-1)
	}
	w, err = c.committedAt(topo, topo.TailCut(), 1)
	if err != nil || w.LowerNs != int64(n-1) {
		t.Fatalf("committed at tail: %s, %v; want lower %d", w, err, n-1)
	}
}

// TestWriterBounds: empty, overlong and too many writer ids are refused.
func TestWriterBounds(t *testing.T) {
	sim := newSimStream("video", 1)
	c := newCore("video", coreConfig{})
	p := sim.append("papa")
	for _, id := range []string{"", string(make([]byte, maxWriterID+1))} {
		if err := c.note(sim.snapshot(), id, 1, p, 1); !errors.Is(err, ErrInvalidWriter) {
			t.Fatalf("writer id of %d bytes: %v", len(id), err)
		}
	}
	for i := range maxWriters {
		c.late(fmt.Sprintf("w%d", i), 1, 1)
	}
	if err := c.note(sim.snapshot(), "one-too-many", 1, p, 1); !errors.Is(err, ErrTooManyWriters) {
		t.Fatalf("writer beyond the bound: %v", err)
	}
	if c.late("another", 0, 1) || c.stats.WritersRefused != 2 {
		t.Fatalf("refused writers: %d", c.stats.WritersRefused)
	}
}

// TestMultiKeyWriter: a writer of two routing keys in two segments keeps
// one position per segment, and its committed mark needs both inside.
func TestMultiKeyWriter(t *testing.T) {
	sim := newSimStream("video", 2)
	c := newCore("video", coreConfig{})
	a := sim.append("papa") // 0.0
	if err := c.note(sim.snapshot(), "w", 10, a, 1); err != nil {
		t.Fatal(err)
	}
	b := sim.append("kilo") // 0.1
	if err := c.note(sim.snapshot(), "w", 20, b, 1); err != nil {
		t.Fatal(err)
	}
	if got := c.writers["w"].pos; len(got) != 2 {
		t.Fatalf("positions %v, want one per segment", got)
	}
	topo := sim.snapshot()
	// Only the second segment committed: the mark at 20 also needs 0.0@0.
	cut := localstream.StreamCut{Stream: "video", Positions: map[localstream.SegmentID]uint64{a.Segment: 0, b.Segment: 1}}
	w, err := c.committedAt(topo, cut, 1)
	if err != nil || w.LowerNs != 10 {
		t.Fatalf("committed %s, %v; want lower 10 (the writer's floor)", w, err)
	}
	w, err = c.committedAt(topo, topo.TailCut(), 1)
	if err != nil || w.LowerNs != 20 {
		t.Fatalf("committed %s, %v; want lower 20", w, err)
	}
}

// TestCommittedRewindBound: committedAt rewinds over failed transactions
// down to the oldest of its last maxResults results; before that, once
// older ones were dropped, it refuses with ErrCutRegressed.
func TestCommittedRewindBound(t *testing.T) {
	sim := newSimStream("video", 1)
	c := newCore("video", coreConfig{})
	var cuts []localstream.StreamCut
	for i := range maxResults + 5 {
		p := sim.append("papa")
		if err := c.note(sim.snapshot(), "w", int64(100+i), p, 1); err != nil {
			t.Fatal(err)
		}
		topo := sim.snapshot()
		cuts = append(cuts, topo.TailCut())
		if _, err := c.committedAt(topo, topo.TailCut(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.results) != maxResults || !c.pruned {
		t.Fatalf("%d results kept (pruned %v), want %d", len(c.results), c.pruned, maxResults)
	}
	topo := sim.snapshot()
	// Rewind to the oldest kept result: fine.
	oldest := cuts[len(cuts)-maxResults]
	w, err := c.committedAt(topo, oldest, 1)
	if err != nil || w.LowerNs != int64(100+len(cuts)-maxResults) {
		t.Fatalf("rewind to %s: %s, %v", oldest, w, err)
	}
	if c.stats.CommittedRewound != maxResults-1 {
		t.Fatalf("rewound %d, want %d", c.stats.CommittedRewound, maxResults-1)
	}
	// Before it: refused.
	if _, err := c.committedAt(topo, cuts[0], 1); !errors.Is(err, ErrCutRegressed) {
		t.Fatalf("cut before every kept result: %v, want ErrCutRegressed", err)
	}
	// Forward again from the rewound state.
	w, err = c.committedAt(topo, topo.TailCut(), 1)
	if err != nil || w.LowerNs != int64(100+len(cuts)-1) {
		t.Fatalf("forward again: %s, %v", w, err)
	}
}

// TestThinningKeepsBehindOnly: a kept mark stands for the dropped ones
// before it, so it is behind-only only if all of them were.
func TestThinningKeepsBehindOnly(t *testing.T) {
	for _, pattern := range []func(i int) bool{
		func(int) bool { return true },
		func(int) bool { return false },
		func(i int) bool { return i%2 == 1 },
		func(i int) bool { return i%3 != 0 },
		func(i int) bool { return i > 500 },
	} {
		w := &writer{id: "w"}
		var behind []bool
		for i := 0; i <= maxHistory; i++ {
			w.noted = int64(i)
			behind = append(behind, pattern(i))
			w.record(pattern(i))
		}
		prev := int64(-1)
		for _, m := range w.hist {
			want := true
			for i := prev + 1; i <= m.t; i++ {
				want = want && behind[i]
			}
			if m.behindOnly != want {
				t.Fatalf("kept mark %d (after %d): behindOnly %v, want %v", m.t, prev, m.behindOnly, want)
			}
			prev = m.t
		}
		if prev != maxHistory || len(w.hist) > maxHistory/2+2 {
			t.Fatalf("thinned to %d marks ending at %d", len(w.hist), prev)
		}
	}
}

// TestCommittedAfterEveryResultLost: restored committed watermarks that
// no longer fit the stream (its tail was lost) leave none to rewind to;
// committedAt starts afresh instead of indexing an empty history (issue
// 11: it panicked).
func TestCommittedAfterEveryResultLost(t *testing.T) {
	sim := newSimStream("video", 1)
	c := newCore("video", coreConfig{})
	p := sim.append("papa")
	if err := c.note(sim.snapshot(), "w", 100, p, 1); err != nil {
		t.Fatal(err)
	}
	topo := sim.snapshot()
	beyond := topo.TailCut().Clone()
	for id := range beyond.Positions {
		beyond.Positions[id] += 10 // a result for events the store lost
	}
	c.restoreWatermarks(topo, nil, []Watermark{{LowerNs: 90, Cut: beyond}}, false)
	if len(c.results) != 0 || !c.pruned {
		t.Fatalf("restore kept %d results (pruned %v)", len(c.results), c.pruned)
	}
	if _, err := c.committedAt(topo, topo.TailCut(), 1); err != nil {
		t.Fatal(err)
	}
}
