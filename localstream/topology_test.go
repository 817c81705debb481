package localstream

import (
	"errors"
	"testing"
)

// mergeThenSplit: A=0.0 [0,.5) len 5 and B=0.1 [.5,1) len 4 merged into
// M=1.2 [0,1) len 6, split into D1=2.3 [0,.5) len 2 and D2=2.4 [.5,1) len 0.
func mergeThenSplit() (Topology, SegmentID, SegmentID, SegmentID, SegmentID, SegmentID) {
	a, b, m, d1, d2 := NewSegmentID(0, 0), NewSegmentID(0, 1), NewSegmentID(1, 2), NewSegmentID(2, 3), NewSegmentID(2, 4)
	t := Topology{Stream: "s", Segments: map[SegmentID]Segment{
		a:  {ID: a, Range: KeyRange{0, .5}, Sealed: true, Length: 5, Successors: []SegmentID{m}},
		b:  {ID: b, Range: KeyRange{.5, 1}, Sealed: true, Length: 4, Successors: []SegmentID{m}},
		m:  {ID: m, Range: KeyRange{0, 1}, Sealed: true, Length: 6, Predecessors: []SegmentID{a, b}, Successors: []SegmentID{d1, d2}},
		d1: {ID: d1, Range: KeyRange{0, .5}, Length: 2, Predecessors: []SegmentID{m}},
		d2: {ID: d2, Range: KeyRange{.5, 1}, Length: 0, Predecessors: []SegmentID{m}},
	}}
	return t, a, b, m, d1, d2
}

func cut(pos map[SegmentID]uint64) StreamCut { return StreamCut{Stream: "s", Positions: pos} }

func TestTopologyValidate(t *testing.T) {
	topo, a, b, m, d1, d2 := mergeThenSplit()
	valid := []map[SegmentID]uint64{{a: 0, b: 0}, {a: 5, b: 1}, {m: 3}, {d1: 1, d2: 0}}
	for _, p := range valid {
		if err := topo.Validate(cut(p)); err != nil {
			t.Errorf("Validate(%v) = %v", cut(p), err)
		}
	}
	invalid := []StreamCut{
		cut(map[SegmentID]uint64{a: 0}),                  // half the key space
		cut(map[SegmentID]uint64{a: 0, m: 0}),            // overlap
		cut(map[SegmentID]uint64{d1: 0, b: 1}),           // b is an ancestor of d1
		cut(map[SegmentID]uint64{a: 6, b: 0}),            // beyond length
		cut(map[SegmentID]uint64{NewSegmentID(9, 9): 0}), // unknown
		{Stream: "other", Positions: map[SegmentID]uint64{m: 0}},
		{Stream: "s"},
	}
	for _, c := range invalid {
		if err := topo.Validate(c); !errors.Is(err, ErrForeignCut) {
			t.Errorf("Validate(%v) = %v, want ErrForeignCut", c, err)
		}
	}
}

func TestTopologyOrderAndJoin(t *testing.T) {
	topo, a, b, m, d1, d2 := mergeThenSplit()
	type pm = map[SegmentID]uint64
	cases := []struct {
		x, y, join pm
		le, ge     bool
	}{
		{pm{a: 1, b: 1}, pm{a: 2, b: 1}, pm{a: 2, b: 1}, true, false},
		{pm{a: 3, b: 1}, pm{a: 2, b: 2}, pm{a: 3, b: 2}, false, false},
		{pm{a: 5, b: 1}, pm{a: 1, b: 4}, pm{m: 0}, false, false},
		{pm{a: 5, b: 3}, pm{m: 0}, pm{m: 0}, true, false},
		{pm{m: 2}, pm{d1: 0, d2: 0}, pm{d1: 0, d2: 0}, true, false},
		{pm{m: 6}, pm{d1: 0, d2: 0}, pm{d1: 0, d2: 0}, true, true}, // end of m ≡ start of its successors
		{pm{d1: 1, d2: 0}, pm{a: 0, b: 0}, pm{d1: 1, d2: 0}, false, true},
	}
	for _, c := range cases {
		le, err := topo.LessEq(cut(c.x), cut(c.y))
		if err != nil || le != c.le {
			t.Errorf("LessEq(%v, %v) = %v, %v; want %v", cut(c.x), cut(c.y), le, err, c.le)
		}
		ge, err := topo.LessEq(cut(c.y), cut(c.x))
		if err != nil || ge != c.ge {
			t.Errorf("LessEq(%v, %v) = %v, %v; want %v", cut(c.y), cut(c.x), ge, err, c.ge)
		}
		j, err := topo.Join(cut(c.x), cut(c.y))
		if err != nil || !j.Equal(cut(c.join)) {
			t.Errorf("Join(%v, %v) = %v, %v; want %v", cut(c.x), cut(c.y), j, err, cut(c.join))
		}
	}
}

func TestTopologyCoveringAndContains(t *testing.T) {
	topo, a, b, m, d1, d2 := mergeThenSplit()
	type pm = map[SegmentID]uint64
	cases := []struct {
		base pm
		pos  []Position
		want pm
	}{
		{pm{a: 0, b: 0}, []Position{{a, 2}}, pm{a: 3, b: 0}},
		{pm{a: 0, b: 0}, []Position{{a, 4}}, pm{a: 5, b: 0}}, // a exhausted; m waits for b
		{pm{a: 0, b: 0}, []Position{{m, 0}}, pm{m: 1}},       // reading m means a and b are done
		{pm{a: 5, b: 4}, []Position{{a, 1}}, pm{a: 2, b: 4}}, // base only where untouched
		{pm{d1: 0, d2: 0}, []Position{{d1, 1}}, pm{d1: 2, d2: 0}},
		{pm{a: 0, b: 0}, []Position{{d1, 0}}, pm{d1: 1, d2: 0}},
	}
	for _, c := range cases {
		got, err := topo.Covering(cut(c.base), c.pos...)
		if err != nil || !got.Equal(cut(c.want)) {
			t.Errorf("Covering(%v, %v) = %v, %v; want %v", cut(c.base), c.pos, got, err, cut(c.want))
		}
		for _, p := range c.pos {
			if in, err := topo.Contains(got, p); err != nil || !in {
				t.Errorf("Contains(%v, %v) = %v, %v", got, p, in, err)
			}
		}
	}
	if in, _ := topo.Contains(cut(pm{m: 3}), Position{m, 3}); in {
		t.Error("m@3 is not before cut m=3")
	}
	if in, _ := topo.Contains(cut(pm{m: 3}), Position{b, 3}); !in {
		t.Error("b@3 is before cut m=3")
	}
	if in, _ := topo.Contains(cut(pm{a: 1, b: 1}), Position{d2, 0}); in {
		t.Error("d2@0 is after cut a=1,b=1")
	}
}

// A merge whose predecessors include one child of a split: an offset in
// the merged segment holds for all its keys.
func TestCoveringMergeOfSplitChild(t *testing.T) {
	a, b, b1, b2, m := NewSegmentID(0, 0), NewSegmentID(0, 1), NewSegmentID(1, 2), NewSegmentID(1, 3), NewSegmentID(2, 4)
	topo := Topology{Stream: "video", Segments: map[SegmentID]Segment{
		a:  {ID: a, Range: KeyRange{0, .5}, Sealed: true, Length: 6, Successors: []SegmentID{m}},
		b:  {ID: b, Range: KeyRange{.5, 1}, Sealed: true, Length: 3, Successors: []SegmentID{b1, b2}},
		b1: {ID: b1, Range: KeyRange{.5, .75}, Sealed: true, Length: 1, Predecessors: []SegmentID{b}, Successors: []SegmentID{m}},
		b2: {ID: b2, Range: KeyRange{.75, 1}, Length: 0, Predecessors: []SegmentID{b}},
		m:  {ID: m, Range: KeyRange{0, .75}, Length: 6, Predecessors: []SegmentID{a, b1}},
	}}
	base := StreamCut{Stream: "video", Positions: map[SegmentID]uint64{m: 1, b2: 0}}
	got, err := topo.Covering(base, Position{b1, 0})
	if err != nil || !got.Equal(base) {
		t.Fatalf("Covering = %v, %v; want %v", got, err, base)
	}
}

func TestKeyHashSpreads(t *testing.T) {
	var buckets [8]int
	for i := range 800 {
		h := KeyHash("drone-" + string(rune('0'+i%10)) + string(rune('a'+i/10%26)) + string(rune('A'+i/260)))
		buckets[int(h*8)]++
	}
	for i, n := range buckets {
		if n < 60 || n > 140 {
			t.Fatalf("bucket %d has %d of 800 keys: %v", i, n, buckets)
		}
	}
	if d := KeyHash("drone-1") - KeyHash("drone-2"); d > -0.01 && d < 0.01 {
		t.Fatalf("drone-1 and drone-2 hash %v apart", d)
	}
}
