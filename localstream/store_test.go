package localstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func openStore(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustStream(t *testing.T, s *Store, name string, segs int) *Stream {
	t.Helper()
	st, err := s.CreateStream(name, StreamConfig{Scaling: ScalingPolicy{MinSegments: segs}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// readAll reads every record from the head to the tail.
func readAll(t *testing.T, st *Stream) []Record {
	t.Helper()
	recs, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestAppendReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	st := mustStream(t, s, "telemetry", 3)
	ctx := context.Background()
	var want []Event
	for i := range 50 {
		ev := Event{RoutingKey: fmt.Sprintf("drone-%d", i%5), Writer: "telemetry/x", EventTime: int64(i),
			ContentType: "application/json", Headers: []Header{{"mqtt-topic", "t"}}, Payload: []byte(fmt.Sprint(i))}
		if _, err := st.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
		want = append(want, ev)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := st.Append(ctx, want[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	s2 := openStore(t, dir, Options{})
	st2, err := s2.Stream("telemetry")
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, st2)
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	perKey := map[string][]int64{}
	for _, r := range got {
		perKey[r.RoutingKey] = append(perKey[r.RoutingKey], r.EventTime)
		if !bytes.Equal(r.Payload, want[r.EventTime].Payload) || r.Headers[0].Value != "t" {
			t.Fatalf("event %d differs: %+v", r.EventTime, r.Event)
		}
	}
	for k, ts := range perKey {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Fatalf("key %s out of order: %v", k, ts)
			}
		}
	}
	// Offsets continue after reopen.
	p, err := st2.Append(ctx, Event{RoutingKey: "drone-0", Writer: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Offset == 0 {
		t.Fatalf("offset restarted at 0 after reopen: %v", p)
	}
}

func TestBadInput(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{MaxEventBytes: 1000})
	for _, name := range []string{"", "Video", "1abc", "a b", "a/b", string(make([]byte, 64))} {
		if _, err := s.CreateStream(name, StreamConfig{}); !errors.Is(err, ErrInvalidStreamName) {
			t.Errorf("CreateStream(%q) = %v, want ErrInvalidStreamName", name, err)
		}
	}
	if _, err := s.CreateStream("x", StreamConfig{Scaling: ScalingPolicy{Type: "magic"}}); err == nil {
		t.Error("bad scaling type accepted")
	}
	st := mustStream(t, s, "video", 1)
	other := mustStream(t, s, "other", 1)
	ctx := context.Background()
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w", Payload: make([]byte, 1000)}); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("oversized: %v", err)
	}
	if _, err := st.Append(ctx, Event{Writer: "w"}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("no routing key: %v", err)
	}
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w", Headers: []Header{{"", "v"}}}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("empty header key: %v", err)
	}
	if got := st.TailCut(); got.Positions[0] != 0 {
		t.Fatalf("rejected events were written: %v", got)
	}
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}); err != nil {
		t.Fatal(err)
	}
	// Cuts of another stream, corrupt cuts, cuts beyond the data.
	if _, err := st.NewReader(other.TailCut(), nil); !errors.Is(err, ErrForeignCut) {
		t.Errorf("reader from other stream's cut: %v", err)
	}
	if err := st.SetCommittedCut("central", other.TailCut()); !errors.Is(err, ErrForeignCut) {
		t.Errorf("committed cut of other stream: %v", err)
	}
	if err := st.SetCommittedCut("central", StreamCut{Stream: "video", Positions: map[SegmentID]uint64{0: 99}}); !errors.Is(err, ErrForeignCut) {
		t.Errorf("cut beyond data: %v", err)
	}
	if _, ok, _ := st.CommittedCut("central"); ok {
		t.Error("an invalid committed cut was stored")
	}
	if _, err := ParseStreamCut("video:zz"); !errors.Is(err, ErrCorruptCut) {
		t.Errorf("corrupt text cut: %v", err)
	}
}

func TestCommittedCutTruncateShed(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	st := mustStream(t, s, "video", 1)
	ctx := context.Background()
	for i := range 20 {
		if _, err := st.Append(ctx, Event{RoutingKey: fmt.Sprint("d", i%2), Writer: "w", EventTime: int64(i + 1), Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	at := func(off uint64) StreamCut { return StreamCut{Stream: "video", Positions: map[SegmentID]uint64{0: off}} }
	if err := st.Truncate(at(5)); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("truncate with no sink: %v", err)
	}
	if err := st.SetCommittedCut("central", at(10)); err != nil {
		t.Fatal(err)
	}
	if err := st.SetCommittedCut("central", at(8)); err == nil {
		t.Fatal("committed cut moved back")
	}
	if err := st.Truncate(at(12)); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("truncate beyond committed: %v", err)
	}
	if err := st.Truncate(at(6)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, st); len(got) != 14 || got[0].Offset != 6 {
		t.Fatalf("after truncate: %d events from %v", len(got), got[0].Position)
	}
	// Shed beyond the committed cut: explicit loss with gap markers.
	res, err := st.Shed(ctx, at(15), "disk_pressure")
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 9 || res.Unreplicated != 5 || len(res.Markers) != 2 {
		t.Fatalf("shed result %+v", res)
	}
	got := readAll(t, st)
	if len(got) != 5+2 {
		t.Fatalf("after shed: %d events", len(got))
	}
	var gaps int
	for _, r := range got {
		if r.Flags.Has(FlagGap) {
			gaps++
			var g Gap
			if err := json.Unmarshal(r.Payload, &g); err != nil || g.Reason != "disk_pressure" || g.Events == 0 {
				t.Fatalf("gap marker %s: %+v %v", r.Payload, g, err)
			}
		}
	}
	if gaps != 2 {
		t.Fatalf("%d gap markers", gaps)
	}
	// A reader from the old committed cut skips what was shed.
	r, err := st.NewReader(at(10), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.TryNext()
	if err != nil || rec.Offset != 15 {
		t.Fatalf("reader from shed range: %v %v", rec.Position, err)
	}
	s.Close()
	s2 := openStore(t, dir, Options{})
	st2, _ := s2.Stream("video")
	if st2.Stats().ShedEvents != 9 {
		t.Fatalf("shed totals after reopen: %+v", st2.Stats())
	}
	if h := st2.HeadCut(); h.Positions[0] != 15 {
		t.Fatalf("head after reopen %v", h)
	}
}

func TestWithMetaAtomic(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	st := mustStream(t, s, "telemetry", 1)
	if _, err := st.Append(context.Background(), Event{RoutingKey: "d", Writer: "w"}, WithMeta("mqtt/c/7", []byte("h"))); err != nil {
		t.Fatal(err)
	}
	v, ok, err := s.GetMeta("mqtt/c/7")
	if err != nil || !ok || string(v) != "h" {
		t.Fatalf("meta %q %v %v", v, ok, err)
	}
	m, _ := s.ScanMeta("mqtt/")
	if len(m) != 1 {
		t.Fatalf("scan %v", m)
	}
}

func TestPeriodicDurability(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{Durability: DurabilityPeriodic})
	st := mustStream(t, s, "health", 1)
	for range 100 {
		if _, err := st.Append(context.Background(), Event{RoutingKey: "a", Writer: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s2 := openStore(t, dir, Options{})
	st2, _ := s2.Stream("health")
	if n := len(readAll(t, st2)); n != 100 {
		t.Fatalf("%d events after clean close in periodic mode", n)
	}
}

func TestLiveTailReader(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	st := mustStream(t, s, "video", 2)
	r, err := st.NewReader(st.TailCut(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Record)
	go func() {
		for {
			rec, err := r.Next(ctx)
			if err != nil {
				close(got)
				return
			}
			got <- rec
		}
	}()
	for i := range 5 {
		if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w", EventTime: int64(i)}); err != nil {
			t.Fatal(err)
		}
		if rec := <-got; rec.EventTime != int64(i) {
			t.Fatalf("got %d want %d", rec.EventTime, i)
		}
	}
	cancel()
	if _, ok := <-got; ok {
		t.Fatal("reader did not stop with ctx")
	}
}

func TestDiskFullAdmission(t *testing.T) {
	// The filesystem's free space goes down by what was appended, as a real
	// one does, so a measurement between appends (every 250 ms, however slow
	// the machine) sees the appends of before it.
	var free, used atomic.Int64
	free.Store(10 << 20)
	s := openStore(t, t.TempDir(), Options{MinFreeBytes: 8 << 20, FreeSpace: func(string) (int64, error) { return free.Load() - used.Load(), nil }})
	st := mustStream(t, s, "video", 1)
	ctx := context.Background()
	ok := 0
	var err error
	for range 100 {
		if _, err = st.Append(ctx, Event{RoutingKey: "d", Writer: "w", Payload: make([]byte, 100<<10)}); err != nil {
			break
		}
		used.Add(100 << 10)
		ok++
	}
	if !errors.Is(err, ErrDiskFull) || ok == 0 || ok > 21 {
		t.Fatalf("after %d appends: %v", ok, err)
	}
	if s.Stats().DiskFullRejects != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
	if got := len(readAll(t, st)); got != ok {
		t.Fatalf("%d stored, %d acknowledged", got, ok)
	}
	free.Store(1<<30 + used.Load()) // space returns
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = st.Append(ctx, Event{RoutingKey: "d", Writer: "w"})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no recovery when space returned: %v", err)
	}
}

// TestShedInterruptedByCrash: a shed recorded but not carried out (the
// process died before deleting) is finished by the next Open: the data is
// deleted and the gap markers are appended, once.
func TestShedInterruptedByCrash(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := mustStream(t, s, "video", 1)
	for i := range 10 {
		if _, err := st.Append(context.Background(), Event{RoutingKey: fmt.Sprint("d", i%2), Writer: "w", Payload: []byte{1}}); err != nil {
			t.Fatal(err)
		}
	}
	cut := StreamCut{Stream: "video", Positions: map[SegmentID]uint64{0: 6}}
	if _, _, _, err := st.prepareShed(cut, "disk_pressure"); err != nil {
		t.Fatal(err)
	}
	s.Close()     // "crash" after recording the shed
	for range 2 { // the second open finds nothing left to do
		s2, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		st2, _ := s2.Stream("video")
		recs := readAll(t, st2)
		gaps := 0
		for _, r := range recs {
			if r.Flags.Has(FlagGap) {
				gaps++
			} else if r.Offset < 6 {
				t.Fatalf("event %v survived the shed", r.Position)
			}
		}
		if gaps != 2 || len(recs) != 4+2 {
			t.Fatalf("after recovery: %d records, %d gap markers", len(recs), gaps)
		}
		if m, _ := s2.ScanMeta("localstream/shed/"); len(m) != 0 {
			t.Fatalf("pending shed records left: %v", m)
		}
		if st2.Stats().ShedEvents != 6 {
			t.Fatalf("shed totals %+v", st2.Stats())
		}
		s2.Close()
	}
}

// TestGapMarkersBelowFloor: shedding at the free-space floor still writes its markers.
func TestGapMarkersBelowFloor(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 30)
	s := openStore(t, t.TempDir(), Options{MinFreeBytes: 8 << 20, FreeSpace: func(string) (int64, error) { return free.Load(), nil }})
	st := mustStream(t, s, "video", 1)
	ctx := context.Background()
	for range 5 {
		if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	free.Store(1 << 20)
	time.Sleep(400 * time.Millisecond) // the free-space sampler runs every 250 ms
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append below the floor: %v", err)
	}
	res, err := st.Shed(ctx, st.TailCut(), "disk_full")
	if err != nil || len(res.Markers) != 1 || res.Events != 5 {
		t.Fatalf("shed below the floor: %+v %v", res, err)
	}
	// A marker carried by a caller passes too; nothing else does.
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w", Flags: FlagGap}, BelowFloor()); err != nil {
		t.Fatalf("carried gap marker below the floor: %v", err)
	}
	if _, err := st.Append(ctx, Event{RoutingKey: "d", Writer: "w"}, BelowFloor()); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("data event with BelowFloor: %v", err)
	}
	// The shed's marker does not count itself as a lost event when shed again.
	res, err = st.Shed(ctx, st.TailCut(), "disk_full")
	if err != nil || res.Events != 0 || len(res.Markers) != 0 {
		t.Fatalf("shedding only gap markers: %+v %v", res, err)
	}
}
