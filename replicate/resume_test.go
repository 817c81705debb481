package replicate

import (
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// oneSegment is a stream of one open segment 0.0 of length n.
func oneSegment(n uint64) localstream.Topology {
	return localstream.Topology{Stream: "t", Segments: map[localstream.SegmentID]localstream.Segment{
		0: {ID: 0, Range: localstream.KeyRange{Low: 0, High: 1}, Length: n},
	}}
}

func at(off uint64) localstream.StreamCut {
	return localstream.StreamCut{Stream: "t", Positions: map[localstream.SegmentID]uint64{0: off}}
}

func atSeg(seg localstream.SegmentID, off uint64) localstream.StreamCut {
	return localstream.StreamCut{Stream: "t", Positions: map[localstream.SegmentID]uint64{seg: off}}
}

func record(seq uint64, store, instance string, base uint32, cut localstream.StreamCut) Committed {
	return Committed{Seq: seq, Record: wire.CommitRecord{Agent: "a1", Stream: "t", Txn: seq, Store: store, Instance: instance,
		EpochBase: base, Cut: cut.Map(), CutText: cut.String()}}
}

// recordOn is record written on station.
func recordOn(station string, seq uint64, store, instance string, base uint32, cut localstream.StreamCut) Committed {
	c := record(seq, store, instance, base, cut)
	c.Record.Station = station
	return c
}

// TestPositionsRoundTrip: central positions under a base map back.
func TestPositionsRoundTrip(t *testing.T) {
	c := localstream.StreamCut{Stream: "t", Positions: map[localstream.SegmentID]uint64{
		localstream.NewSegmentID(0, 0): 4, localstream.NewSegmentID(3, 7): 9}}
	for _, b := range []uint32{0, 1, 1000} {
		back, ok := toLocal(toCentral(c, b), b)
		if !ok || !back.Equal(c) {
			t.Fatalf("base %d: %s -> %s", b, c, back)
		}
	}
	if _, ok := toLocal(c, 1); ok {
		t.Fatal("a cut with epoch 0 read under base 1")
	}
}

// TestMonotoneWatermark: a record never carries less than its chain
// predecessor, whatever the tracker says.
func TestMonotoneWatermark(t *testing.T) {
	topo := oneSegment(100)
	prev := record(5, "S", "run0", 0, at(50)).Record
	prev.Watermark = wire.WatermarkJSON{LowerNs: 100, UpperNs: 200, Cut: at(40).Map()}
	got := monotoneWatermark(topo, watermark.Watermark{LowerNs: 90, UpperNs: 150, Cut: at(30)}, prev, "S", 0)
	if got.LowerNs != 100 || got.UpperNs != 200 || !got.Cut.Equal(at(40)) {
		t.Fatalf("rewound tracker: %+v", got)
	}
	got = monotoneWatermark(topo, watermark.Watermark{LowerNs: 300, UpperNs: 400, Cut: at(60)}, prev, "S", 0)
	if got.LowerNs != 300 || got.UpperNs != 400 || !got.Cut.Equal(at(60)) {
		t.Fatalf("advancing tracker: %+v", got)
	}
	got = monotoneWatermark(topo, watermark.Watermark{}, prev, "S", 0)
	if got.LowerNs != 100 || !got.Cut.Equal(at(40)) {
		t.Fatalf("refused tracker: %+v", got)
	}
	other := prev
	other.Store = "T"
	got = monotoneWatermark(topo, watermark.Watermark{LowerNs: 50, Cut: at(10)}, other, "S", 0)
	if got.LowerNs != 100 || !got.Cut.Equal(at(10)) {
		t.Fatalf("another store's predecessor: %+v", got)
	}
}
