package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// fakeDisk is an injected DiskSpace whose free space the test sets.
type fakeDisk struct {
	mu          sync.Mutex
	free, total int64
}

func (d *fakeDisk) set(free int64) { d.mu.Lock(); d.free = free; d.mu.Unlock() }
func (d *fakeDisk) space(string) (int64, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.free, d.total, nil
}

// pressureRig is a real store with video and telemetry streams (2 segments
// each) and a Pressure on an injected disk.
type pressureRig struct {
	store *localstream.Store
	video *localstream.Stream
	tele  *localstream.Stream
	disk  *fakeDisk
	p     *Pressure
}

func newPressureRig(t *testing.T, policy []ShedRule) *pressureRig {
	t.Helper()
	s := rigs.OpenStore(t, t.TempDir(), localstream.Options{MinFreeBytes: -1})
	cfg := localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}}
	v, err := s.CreateStream("video", cfg)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := s.CreateStream("telemetry", cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDisk{free: 1000, total: 1000}
	p, err := NewPressure(s, PressureConfig{RetainBelow: Threshold{Percent: 50}, ShedBelow: Threshold{Bytes: 200},
		Policy: policy, ShedFraction: 0.25, MinShedEvents: 1, DiskSpace: d.space, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return &pressureRig{store: s, video: v, tele: tl, disk: d, p: p}
}

// fill appends n events per drone for drones d0..d3 and returns their positions.
func fill(t *testing.T, st *localstream.Stream, n int) map[localstream.Position]string {
	t.Helper()
	out := map[localstream.Position]string{}
	for i := range n {
		for d := range 4 {
			id := fmt.Sprintf("%s-d%d-%d", st.Name(), d, i)
			pos, err := st.Append(context.Background(), localstream.Event{RoutingKey: fmt.Sprintf("d%d", d),
				Writer: st.Name() + "/d", EventTime: int64(i + 1), Payload: []byte(id)})
			if err != nil {
				t.Fatal(err)
			}
			out[pos] = id
		}
	}
	return out
}

// commitHalf sets sink "central"'s committed cut after the first half of st.
func commitHalf(t *testing.T, st *localstream.Stream) localstream.StreamCut {
	t.Helper()
	topo := st.Topology()
	c := topo.OpenAtZero()
	for id, s := range topo.Segments {
		c.Positions[id] = s.Length / 2
	}
	if err := st.SetCommittedCut("central", c); err != nil {
		t.Fatal(err)
	}
	return c
}

func payloads(t *testing.T, st *localstream.Stream) (data map[string]bool, gaps []localstream.Gap) {
	data = map[string]bool{}
	for _, r := range readAll(t, st) {
		if r.Flags.Has(localstream.FlagGap) {
			var g localstream.Gap
			if err := json.Unmarshal(r.Payload, &g); err != nil {
				t.Fatal(err)
			}
			gaps = append(gaps, g)
			continue
		}
		data[string(r.Payload)] = true
	}
	return data, gaps
}

func TestPressureStates(t *testing.T) {
	rig := newPressureRig(t, nil)
	fill(t, rig.video, 10)
	commitHalf(t, rig.video)
	for _, tc := range []struct {
		free int64
		want State
	}{{1000, StateOK}, {500, StateOK}, {499, StateRetain}, {200, StateRetain}, {199, StateShed}, {0, StateShed}} {
		rig.disk.set(tc.free)
		got, err := rig.p.Check(context.Background())
		if err != nil || got != tc.want || rig.p.State() != tc.want {
			t.Fatalf("free %d: state %s (%v), want %s", tc.free, got, err, tc.want)
		}
	}
	st := rig.p.Stats()
	if st.RetainBelowBytes != 500 || st.ShedBelowBytes != 200 || st.TotalBytes != 1000 || st.Checks < 6 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPressureRetain: below RetainBelow exactly the replicated half goes,
// without gap markers; nothing happens above it.
func TestPressureRetain(t *testing.T) {
	rig := newPressureRig(t, nil)
	all := fill(t, rig.video, 20)
	committed := commitHalf(t, rig.video)
	ctx := context.Background()
	if _, err := rig.p.Check(ctx); err != nil { // free 100%: ok
		t.Fatal(err)
	}
	if data, _ := payloads(t, rig.video); len(data) != 80 {
		t.Fatalf("retained %d of 80 with free space", len(data))
	}
	rig.disk.set(400)
	if s, err := rig.p.Check(ctx); err != nil || s != StateRetain {
		t.Fatalf("%s %v", s, err)
	}
	data, gaps := payloads(t, rig.video)
	topo := rig.video.Topology()
	for pos, id := range all {
		in, _ := topo.Contains(committed, pos)
		if in == data[id] {
			t.Fatalf("%s at %s: committed %v, retained %v", id, pos, in, data[id])
		}
	}
	if n := cutSum(committed); len(gaps) != 0 || uint64(len(data)) != 80-n || rig.p.Stats().Streams["video"].TruncatedEvents != n {
		t.Fatalf("gaps %d, data %d, stats %+v", len(gaps), len(data), rig.p.Stats().Streams["video"])
	}
	// Telemetry has no sink: never truncated.
	tele := fill(t, rig.tele, 5)
	rig.p.Check(ctx)
	if data, _ := payloads(t, rig.tele); len(data) != len(tele) {
		t.Fatalf("telemetry without a sink lost data: %d of %d", len(data), len(tele))
	}
}

// TestPressureShedPolicy: below ShedBelow, video (allowed) is shed oldest
// first with gap markers until only markers remain, while telemetry (not
// allowed) loses only what the centre committed, and health-like streams
// not in the policy are never shed.
func TestPressureShedPolicy(t *testing.T) {
	rig := newPressureRig(t, []ShedRule{{Stream: "video", AllowUnreplicated: true}, {Stream: "telemetry"}})
	ctx := context.Background()
	vids := fill(t, rig.video, 25)
	teles := fill(t, rig.tele, 25)
	vcut := commitHalf(t, rig.video)
	tcut := commitHalf(t, rig.tele)
	rig.disk.set(100)
	committed := cutSum(vcut)
	left := 100 - committed
	shed := (left + 3) / 4 // ShedFraction 0.25, rounded up

	if _, err := rig.p.Check(ctx); err != nil {
		t.Fatal(err)
	}
	vs := rig.p.Stats().Streams["video"]
	// Retention took the committed half, then a quarter of what was left was shed.
	if vs.TruncatedEvents != committed || vs.Sheds != 1 || vs.ShedEvents != shed || vs.ShedUnreplicated != shed || vs.GapMarkers == 0 {
		t.Fatalf("video after one check: %+v; committed %d, want %d shed", vs, committed, shed)
	}
	data, gaps := payloads(t, rig.video)
	if uint64(len(data)) != left-shed || len(gaps) != int(vs.GapMarkers) {
		t.Fatalf("video data %d, gaps %d", len(data), len(gaps))
	}
	var gapEvents uint64
	for _, g := range gaps {
		if g.Reason != ShedReason || g.Events == 0 || g.Unreplicated != g.Events {
			t.Fatalf("gap %+v", g)
		}
		gapEvents += g.Events
	}
	if gapEvents != shed {
		t.Fatalf("gap markers report %d events, shed %d", gapEvents, shed)
	}
	// Oldest first: per drone, what is left is a suffix of what was written.
	checkSuffixes(t, vids, data)

	for i := 0; i < 30; i++ {
		if _, err := rig.p.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	data, gaps = payloads(t, rig.video)
	vs = rig.p.Stats().Streams["video"]
	if len(data) != 0 || vs.ShedEvents < 50 || vs.MarkersCarried == 0 {
		t.Fatalf("video not shed to the markers: %d left, %+v", len(data), vs)
	}
	if len(gaps) == 0 {
		t.Fatal("every gap marker lost")
	}
	// Telemetry: exactly the uncommitted half survives.
	tdata, tgaps := payloads(t, rig.tele)
	topo := rig.tele.Topology()
	for pos, id := range teles {
		in, _ := topo.Contains(tcut, pos)
		if !in && !tdata[id] {
			t.Fatalf("unreplicated telemetry %s at %s lost", id, pos)
		}
	}
	if len(tgaps) != 0 || uint64(len(tdata)) != 100-cutSum(tcut) || rig.p.Stats().Streams["telemetry"].ShedEvents != 0 {
		t.Fatalf("telemetry: %d left, %d gaps, %+v", len(tdata), len(tgaps), rig.p.Stats().Streams["telemetry"])
	}
}

// cutSum is the number of events before c in a stream never truncated or scaled.
func cutSum(c localstream.StreamCut) uint64 {
	var n uint64
	for _, off := range c.Positions {
		n += off
	}
	return n
}

// checkSuffixes: for each drone, the retained ids are the newest ones.
func checkSuffixes(t *testing.T, all map[localstream.Position]string, kept map[string]bool) {
	t.Helper()
	oldestKept := map[string]int{}
	newestGone := map[string]int{}
	for _, id := range all {
		var stream, drone string
		var i int
		if n, err := fmt.Sscanf(id, "%5s-%2s-%d", &stream, &drone, &i); n != 3 {
			t.Fatalf("id %q: %v", id, err)
		}
		if kept[id] {
			if v, ok := oldestKept[drone]; !ok || i < v {
				oldestKept[drone] = i
			}
		} else if v, ok := newestGone[drone]; !ok || i > v {
			newestGone[drone] = i
		}
	}
	for d, gone := range newestGone {
		if k, ok := oldestKept[d]; ok && k < gone {
			t.Fatalf("drone %s: kept #%d but dropped the newer #%d", d, k, gone)
		}
	}
}

// TestPressureDefaultPolicyNeverSheds: with the default policy, nothing
// unreplicated is ever dropped, however low the disk.
func TestPressureDefaultPolicyNeverSheds(t *testing.T) {
	rig := newPressureRig(t, nil)
	fill(t, rig.video, 10)
	rig.disk.set(0)
	for range 5 {
		if s, err := rig.p.Check(context.Background()); err != nil || s != StateShed {
			t.Fatalf("%s %v", s, err)
		}
	}
	if data, gaps := payloads(t, rig.video); len(data) != 40 || len(gaps) != 0 {
		t.Fatalf("default policy dropped data: %d left, %d gaps", len(data), len(gaps))
	}
}

func TestPressureConfigValidate(t *testing.T) {
	for _, c := range []PressureConfig{
		{RetainBelow: Threshold{Percent: 10}, ShedBelow: Threshold{Percent: 20}},
		{RetainBelow: Threshold{Bytes: 10}, ShedBelow: Threshold{Bytes: 10}},
		{Interval: -1},
		{ShedFraction: 2},
		{MinShedEvents: -1},
		{Policy: []ShedRule{{Stream: "Video"}}},
		{Policy: []ShedRule{{Stream: "video"}, {Stream: "video"}}},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := NewDefaultPressureConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (PressureConfig{RetainBelow: Threshold{Percent: 5}, ShedBelow: Threshold{Bytes: 1 << 30}}).Validate(); err != nil {
		t.Fatal(err) // mixed units are resolved at run time
	}
}

// TestPressureCarriedMarkersSurviveRestart: a shed at the store's floor
// whose range holds unreplicated gap markers of an earlier shed deletes
// them and appends their copies at once: carried markers pass the floor
// like localstream's own (they waited for space that only their shed
// could free). A copy recorded but not yet appended when the agent
// stopped (a crash) survives the restart and is appended once; one whose
// original is still retained (a crash before the shed) is dropped.
func TestPressureCarriedMarkersSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	storeFree := int64(1 << 40)
	freeFn := func(string) (int64, error) { mu.Lock(); defer mu.Unlock(); return storeFree, nil }
	s, err := localstream.Open(dir, localstream.Options{MinFreeBytes: 1 << 20, FreeSpace: freeFn, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := s.CreateStream("video", localstream.StreamConfig{})
	disk := &fakeDisk{free: 0, total: 1000}
	cfg := PressureConfig{RetainBelow: Threshold{Bytes: 500}, ShedBelow: Threshold{Bytes: 200}, ShedFraction: 1,
		Policy: []ShedRule{{Stream: "video", AllowUnreplicated: true}}, DiskSpace: disk.space, Logger: quietLogger()}
	p, err := NewPressure(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fill(t, v, 10)
	if _, err := p.Check(ctx); err != nil { // sheds all 40: 4 markers at the tail
		t.Fatal(err)
	}
	firstMarkers := readAll(t, v)
	fill(t, v, 2) // 8 events after the markers
	mu.Lock()
	storeFree = 0
	mu.Unlock()
	testkit.WaitFor(t, time.Minute, "store refusing appends", func() bool {
		_, err := v.Append(ctx, localstream.Event{RoutingKey: "x", Writer: "w"})
		return errors.Is(err, localstream.ErrDiskFull)
	})
	if _, err := p.Check(ctx); err != nil {
		t.Fatal(err)
	}
	data, gaps := payloads(t, v)
	st := p.Stats()
	if len(data) != 0 || st.PendingMarkers != 0 || st.Streams["video"].MarkersCarried != 4 || uint64(len(gaps)) != st.Streams["video"].GapMarkers {
		t.Fatalf("at the floor: data %d, gaps %d, stats %+v", len(data), len(gaps), st)
	}
	if kept, _ := s.ScanMeta(markerPrefix); len(kept) != 0 {
		t.Fatalf("%d carried markers still recorded after their append", len(kept))
	}
	// Fake two records left by crashes: one after the shed deleted its
	// original (to be appended), one before (its original is retained:
	// to be dropped).
	crashed, _ := json.Marshal(storedMarker{Origin: firstMarkers[0].Position, RoutingKey: "d0", Writer: localstream.ShedWriter,
		Flags: localstream.FlagGap, Payload: []byte(`{"crash":1}`)})
	var retainedMarker localstream.Record
	for _, r := range readAll(t, v) {
		if r.Flags.Has(localstream.FlagGap) {
			retainedMarker = r
			break
		}
	}
	retained, _ := json.Marshal(storedMarker{Origin: retainedMarker.Position, RoutingKey: "d0", Writer: localstream.ShedWriter,
		Flags: localstream.FlagGap, Payload: []byte("{}")})
	if err := s.PutMeta(markerPrefix+"video/99999999999999999998-00000001", crashed); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta(markerPrefix+"video/99999999999999999999-00000001", retained); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = rigs.OpenStore(t, dir, localstream.Options{Logger: quietLogger()}) // space is back
	v, _ = s.Stream("video")
	markersBefore := len(gapsOf(t, v))
	p, err = NewPressure(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.Stats().PendingMarkers; n != 1 {
		t.Fatalf("%d markers pending after restart, want 1", n)
	}
	disk.set(1000)
	for range 2 {
		if _, err := p.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(gapsOf(t, v)); got != markersBefore+1 || p.Stats().PendingMarkers != 0 {
		t.Fatalf("%d gap markers, want %d+1; stats %+v", got, markersBefore, p.Stats())
	}
	firstPayloads := map[string]bool{}
	for _, r := range firstMarkers {
		firstPayloads[string(r.Payload)] = true
	}
	var first, crash int
	for _, r := range readAll(t, v) {
		if firstPayloads[string(r.Payload)] { // the first shed's markers, carried
			first++
		}
		if string(r.Payload) == `{"crash":1}` {
			crash++
		}
	}
	if first != 4 || crash != 1 {
		t.Fatalf("%d carried markers of the first shed (want 4), %d recovered after the crash (want 1)", first, crash)
	}
	if left, err := s.ScanMeta(markerPrefix); err != nil || len(left) != 0 {
		t.Fatalf("marker keys left: %v %v", left, err)
	}
}

func gapsOf(t *testing.T, st *localstream.Stream) []localstream.Gap {
	_, gaps := payloads(t, st)
	return gaps
}

// TestCarriedMarkerOnceWhenCheckCancelled: a check's ctx ends (Run
// stopping) while a carried gap marker's append is queued, and the append
// lands. The marker is appended, so it is not pending: a later check
// appending it again would report its gap twice at the centre
// (TestFullDiskCentreAway failed so, "gap marker twice at the centre",
// when its stop fell inside such an append).
func TestCarriedMarkerOnceWhenCheckCancelled(t *testing.T) {
	// The committer reads the store's clock as it writes a batch: after
	// the append was queued, before it is durable.
	var cancelAtCommit atomic.Pointer[context.CancelFunc]
	now := func() time.Time {
		if c := cancelAtCommit.Swap(nil); c != nil {
			(*c)()
		}
		return time.Now()
	}
	s := rigs.OpenStore(t, t.TempDir(), localstream.Options{MinFreeBytes: -1, Now: now})
	v, err := s.CreateStream("video", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	disk := &fakeDisk{free: 0, total: 1000}
	p, err := NewPressure(s, PressureConfig{RetainBelow: Threshold{Bytes: 500}, ShedBelow: Threshold{Bytes: 200}, ShedFraction: 1,
		Policy: []ShedRule{{Stream: "video", AllowUnreplicated: true}}, DiskSpace: disk.space, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, v, 10)
	if _, err := p.Check(context.Background()); err != nil { // sheds all 40: 4 markers
		t.Fatal(err)
	}
	marker := readAll(t, v)[0]
	m := p.recordMarker(v, marker)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelAtCommit.Store(&cancel)
	p.appendMarker(ctx, m, true)
	if cancelAtCommit.Load() != nil || ctx.Err() == nil {
		t.Fatal("the fault did not happen: ctx did not end while the append was queued")
	}
	p.retryMarkers(context.Background())
	copies := 0
	for _, r := range readAll(t, v) {
		if string(r.Payload) == string(marker.Payload) && r.RoutingKey == marker.RoutingKey {
			copies++
		}
	}
	st := p.Stats()
	if copies != 2 || st.PendingMarkers != 0 || st.Streams["video"].MarkersCarried != 1 {
		t.Fatalf("marker %s: %d in the stream (want the original and one copy), %d pending, %d carried", marker.Position, copies, st.PendingMarkers, st.Streams["video"].MarkersCarried)
	}
	if kept, _ := s.ScanMeta(markerPrefix); len(kept) != 0 {
		t.Fatalf("carried marker still recorded after its append: %v", kept)
	}
}
