package replicate

import (
	"errors"
	"testing"
	"time"

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

// TestDecide is the resume decision's table: every case of issue 11 and
// the fencing rules, one row each.
func TestDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	known := func(i string) bool { return i == "run0" || i == "run1" }
	ptr := func(c localstream.StreamCut) *localstream.StreamCut { return &c }
	base := func(mod func(*ResumeInput)) ResumeInput {
		in := ResumeInput{Stream: "t", Store: "S", Instance: "run1", KnownInstance: known,
			Station: "M", Topo: oneSegment(100), Head: at(0), Recovered: at(100), Now: now}
		mod(&in)
		return in
	}
	type want struct {
		kind   ResumeKind
		from   localstream.StreamCut
		base   uint32
		lost   wire.LossReason
		lostTo localstream.StreamCut
		err    error
		adopt  bool
	}
	for _, tc := range []struct {
		name string
		in   ResumeInput
		want want
	}{
		{"fresh store, empty centre", base(func(in *ResumeInput) {}),
			want{kind: ResumeContinue, from: at(0)}},
		{"centre lost everything, all retained", base(func(in *ResumeInput) { in.Committed = ptr(at(60)) }),
			want{kind: ResumeResend, from: at(0)}},
		{"centre lost everything, head truncated", base(func(in *ResumeInput) { in.Committed = ptr(at(60)); in.Head = at(30) }),
			want{kind: ResumeResend, from: at(30), lost: wire.LossCentralTail, lostTo: at(30)}},
		{"own chain", base(func(in *ResumeInput) { in.Committed = ptr(at(60)); in.Last = record(7, "S", "run0", 0, at(60)) }),
			want{kind: ResumeContinue, from: at(60)}},
		{"own chain under a base", base(func(in *ResumeInput) {
			in.Base = 2
			in.Last = record(7, "S", "run0", 2, atSeg(localstream.NewSegmentID(2, 0), 40))
		}), want{kind: ResumeContinue, from: at(40), base: 2}},
		{"record before identities, of this store upgraded in place", base(func(in *ResumeInput) {
			in.RecordedAtOpen, in.Committed = ptr(at(60)), ptr(at(60))
			in.Last = record(7, "", "old", 0, at(60))
		}), want{kind: ResumeContinue, from: at(60)}},
		{"issue 29 case 3: record before identities, another store's", base(func(in *ResumeInput) { in.Last = record(7, "", "old", 0, at(60)) }),
			want{kind: ResumeRefuse, err: ErrTwin}},
		{"issue 29 case 3: record before identities, an identity-era store's record", base(func(in *ResumeInput) {
			in.RecordedAtOpen, in.RecordedBy = ptr(at(60)), "run0"
			in.Last = record(7, "", "old", 0, at(60))
		}), want{kind: ResumeRefuse, err: ErrTwin}},
		{"issue 29 case 3: record before identities, operator takes over", base(func(in *ResumeInput) {
			in.Takeover = true
			in.Last = record(7, "", "old", 0, at(60))
		}), want{kind: ResumeRebase, from: at(0), base: 1, lost: wire.LossStoreReplaced}},
		{"case 1: local tail lost (centre beyond recovered)", base(func(in *ResumeInput) {
			in.Topo, in.Recovered = oneSegment(90), at(80) // 10 appended since Open, at reused offsets
			in.Last = record(7, "S", "run0", 0, at(85))
		}), want{kind: ResumeRebase, from: at(80), base: 1, lost: wire.LossLocalTail}},
		{"case 1: local tail lost (offsets beyond the segment)", base(func(in *ResumeInput) {
			in.Topo, in.Recovered = oneSegment(80), at(80)
			in.Last = record(7, "S", "run0", 0, at(100))
		}), want{kind: ResumeRebase, from: at(80), base: 1, lost: wire.LossLocalTail}},
		{"case 1: local tail lost (a scale lost)", base(func(in *ResumeInput) {
			in.Topo, in.Recovered = oneSegment(80), at(80)
			in.Last = record(7, "S", "run0", 0, atSeg(localstream.NewSegmentID(1, 1), 3))
		}), want{kind: ResumeRebase, from: at(80), base: 2, lost: wire.LossLocalTail}},
		{"case 2: centre behind, all retained", base(func(in *ResumeInput) {
			in.Committed = ptr(at(90))
			in.Last = record(7, "S", "run0", 0, at(50))
		}), want{kind: ResumeResend, from: at(50)}},
		{"case 2: centre behind, retention deleted part", base(func(in *ResumeInput) {
			in.Committed, in.Head = ptr(at(90)), at(70)
			in.Last = record(7, "S", "run0", 0, at(50))
		}), want{kind: ResumeResend, from: at(70), lost: wire.LossCentralTail, lostTo: at(70)}},
		{"both: the centre and the store lost their tails", base(func(in *ResumeInput) {
			in.Topo, in.Recovered = oneSegment(70), at(60) // 10 appended since Open
			in.RecordedAtOpen = ptr(at(90))
			in.Committed = nil
			in.Last = record(7, "S", "run0", 0, at(50))
		}), want{kind: ResumeRebase, from: at(50), base: 1, lost: wire.LossLocalTail}},
		{"both: the centre lost everything, the store its tail", base(func(in *ResumeInput) {
			in.Topo, in.Recovered, in.Head = oneSegment(70), at(60), at(20)
			in.RecordedAtOpen = ptr(at(90))
		}), want{kind: ResumeRebase, from: at(20), base: 1, lost: wire.LossLocalTail}},
		{"case 4: a copy of this store (unknown run, unknown station)", base(func(in *ResumeInput) { in.Last = record(7, "S", "stranger", 0, at(60)) }),
			want{kind: ResumeRefuse, err: ErrTwin}},
		{"case 4: a copy of this store on another station", base(func(in *ResumeInput) { in.Last = recordOn("N", 7, "S", "stranger", 0, at(60)) }),
			want{kind: ResumeRefuse, err: ErrTwin}},
		{"case 4: a copy of this store, operator takes over", base(func(in *ResumeInput) {
			in.Takeover, in.Committed = true, ptr(at(40))
			in.Last = record(7, "S", "stranger", 0, at(60))
		}), want{kind: ResumeRebase, from: at(40), base: 1, lost: wire.LossStoreReplaced}},
		{"issue 29 case 2: restored backup (a later run on this station)", base(func(in *ResumeInput) {
			in.Topo, in.Recovered = oneSegment(60), at(50) // 10 appended since the restore
			in.Committed = ptr(at(30))
			in.Last = recordOn("M", 7, "S", "later", 0, at(80))
		}), want{kind: ResumeRebase, from: at(50), base: 1, lost: wire.LossLocalTail}},
		{"issue 29 case 2: restored backup behind a rebased chain", base(func(in *ResumeInput) {
			in.Topo, in.Recovered = oneSegment(60), at(50)
			in.Last = recordOn("M", 7, "S", "later", 3, atSeg(localstream.NewSegmentID(3, 0), 20))
		}), want{kind: ResumeRebase, from: at(20), base: 4, lost: wire.LossLocalTail}},
		{"issue 29 case 1: another station's chain: refused at once", base(func(in *ResumeInput) { in.Last = recordOn("N", 7, "T", "x", 0, at(60)) }),
			want{kind: ResumeRefuse, err: ErrTwin}},
		{"issue 29 case 1: another station's chain unchanged for long: still refused", base(func(in *ResumeInput) {
			in.Started, in.StartSeq = true, 7
			in.Now = now.Add(time.Hour)
			in.Last = recordOn("N", 7, "T", "x", 0, at(60))
		}), want{kind: ResumeRefuse, err: ErrTwin}},
		{"another store of an unknown station: refused", base(func(in *ResumeInput) { in.Last = record(7, "T", "x", 0, at(60)) }),
			want{kind: ResumeRefuse, err: ErrTwin}},
		{"this station unknown: another store never taken for its own", base(func(in *ResumeInput) {
			in.Station = ""
			in.Last = record(7, "T", "x", 0, at(60))
		}), want{kind: ResumeRefuse, err: ErrTwin}},
		{"replaced disk on this station: taken over at once", base(func(in *ResumeInput) {
			in.Last = recordOn("M", 7, "T", "x", 4, atSeg(localstream.NewSegmentID(5, 3), 60))
		}), want{kind: ResumeRebase, from: at(0), base: 6, lost: wire.LossStoreReplaced}},
		{"case 4: operator takes over another station's chain", base(func(in *ResumeInput) {
			in.Takeover = true
			in.Last = recordOn("N", 7, "T", "x", 0, at(60))
		}), want{kind: ResumeRebase, from: at(0), base: 1, lost: wire.LossStoreReplaced}},
		{"the operator's order holds while the chain is where it was read", base(func(in *ResumeInput) {
			in.Takeover, in.Started, in.StartSeq = true, true, 7
			in.Last = recordOn("N", 7, "T", "x", 0, at(60))
		}), want{kind: ResumeRebase, from: at(0), base: 1, lost: wire.LossStoreReplaced}},
		{"the operator's order does not cover a later commit", base(func(in *ResumeInput) {
			in.Takeover, in.Started, in.StartSeq = true, true, 7
			in.Last = recordOn("N", 9, "T", "x", 0, at(70))
		}), want{kind: ResumeRefuse, err: ErrFenced}},
		{"taken over during the run: fenced", base(func(in *ResumeInput) {
			in.Started, in.StartSeq, in.OwnCommits = true, 7, 3
			in.Last = record(12, "T", "x", 3, at(70))
		}), want{kind: ResumeRefuse, err: ErrFenced}},
		{"late commit of our dead predecessor: adopted once", base(func(in *ResumeInput) {
			in.Started, in.StartSeq = true, 7
			in.Last = record(8, "S", "run0", 0, at(70))
		}), want{kind: ResumeContinue, from: at(70), adopt: true}},
		{"a second foreign commit of our store: fenced", base(func(in *ResumeInput) {
			in.Started, in.StartSeq, in.Adopted = true, 7, 1
			in.Last = record(9, "S", "run0", 0, at(75))
		}), want{kind: ResumeRefuse, err: ErrFenced}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.in)
			if got.Kind != tc.want.kind {
				t.Fatalf("kind %s, want %s (err %v)", got.Kind, tc.want.kind, got.Err)
			}
			if tc.want.err != nil && !errors.Is(got.Err, tc.want.err) {
				t.Fatalf("err %v, want %v", got.Err, tc.want.err)
			}
			if tc.want.err == nil && got.Err != nil {
				t.Fatalf("unexpected err %v", got.Err)
			}
			if got.Adopt != tc.want.adopt {
				t.Fatalf("adopt %v, want %v", got.Adopt, tc.want.adopt)
			}
			if got.Kind == ResumeRefuse {
				return
			}
			if !got.From.Equal(tc.want.from) {
				t.Fatalf("from %s, want %s", got.From, tc.want.from)
			}
			if got.Base != tc.want.base {
				t.Fatalf("base %d, want %d", got.Base, tc.want.base)
			}
			switch {
			case tc.want.lost == "" && got.Lost != nil:
				t.Fatalf("lost %s, want none", got.Lost)
			case tc.want.lost != "" && got.Lost == nil:
				t.Fatalf("no loss reported, want %s", tc.want.lost)
			case got.Lost != nil:
				if got.Lost.Reason != tc.want.lost {
					t.Fatalf("loss %s, want %s", got.Lost.Reason, tc.want.lost)
				}
				if len(got.Lost.From) == 0 {
					t.Fatalf("loss without start: %s", got.Lost)
				}
				to, _ := got.Lost.To.Cut("t")
				if !tc.want.lostTo.Equal(to) && !(tc.want.lostTo.IsZero() && len(got.Lost.To) == 0) {
					t.Fatalf("loss end %v, want %s", got.Lost.To, tc.want.lostTo)
				}
			}
			if got.Base > 0 && got.Kind == ResumeRebase && tc.in.Last.Seq > 0 {
				c, _ := tc.in.Last.Record.StreamCut()
				if got.Base <= maxEpoch(c) {
					t.Fatalf("base %d does not clear the chain's epoch %d", got.Base, maxEpoch(c))
				}
			}
		})
	}
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
