package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// ack is an event the store acknowledged (durable).
type ack struct {
	stream, key, id string
	pos             localstream.Position
}

// ingestLoad appends video chunks and telemetry messages of two drones as
// fast as the store takes them, remembering every acknowledged event and
// counting refusals (localstream.ErrDiskFull) per stream.
type ingestLoad struct {
	video, tele *localstream.Stream
	rng         *rand.Rand

	mu      sync.Mutex
	acked   []ack
	refused map[string]uint64
	ackedN  map[string]uint64
	other   error // any error but disk full: the test fails
}

// run appends until stop is set. Appends are not cancelled: every event
// the store wrote is acknowledged and remembered.
func (l *ingestLoad) run(stop *atomic.Bool) {
	for i := 0; !stop.Load(); i++ {
		drone := fmt.Sprintf("d%d", i%2)
		l.append(l.video, drone, fmt.Sprintf("video/%s/%d", drone, i), 32<<10+l.rng.IntN(32<<10))
		l.append(l.tele, drone, fmt.Sprintf("telemetry/%s/%d", drone, i), 200)
	}
}

func (l *ingestLoad) append(st *localstream.Stream, drone, id string, size int) {
	payload := make([]byte, size) // random: Badger's Snappy cannot shrink it
	for i := range payload {
		payload[i] = byte(l.rng.Uint32())
	}
	copy(payload, id+"\n")
	now := time.Now().UnixNano()
	pos, err := st.Append(context.Background(), localstream.Event{RoutingKey: drone, Writer: st.Name() + "/" + drone,
		EventTime: now, IngestTime: now, Payload: payload})
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.acked = append(l.acked, ack{stream: st.Name(), key: drone, id: id, pos: pos})
		l.ackedN[st.Name()]++
	case errors.Is(err, localstream.ErrDiskFull):
		l.refused[st.Name()]++
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // the ingest's back-off
		l.mu.Lock()
	default:
		if l.other == nil {
			l.other = err
		}
	}
}

func (l *ingestLoad) counts() (acked, refused map[string]uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, r := map[string]uint64{}, map[string]uint64{}
	for k, v := range l.ackedN {
		a[k] = v
	}
	for k, v := range l.refused {
		r[k] = v
	}
	return a, r, l.other
}

var lastLog atomic.Int64

// logEvery logs at most once a second (progress of a long wait).
func logEvery(t *testing.T, format string, args ...any) {
	now := time.Now().UnixNano()
	if last := lastLog.Load(); now-last > int64(2*time.Second) && lastLog.CompareAndSwap(last, now) {
		t.Logf(format, args...)
	}
}

func payloadID(p []byte) string {
	for i, b := range p {
		if b == '\n' {
			return string(p[:i])
		}
	}
	return ""
}

// TestDiskFull drives ingest on a small filesystem (a tmpfs with a size
// limit when the test may mount one) into disk pressure and then to the
// store's hard floor, and back:
//   - below retain_below, replicated data is truncated; below shed_below,
//     video (policy: allow_unreplicated) is shed oldest first with gap
//     markers, while telemetry (not allowed) is never shed;
//   - at the floor, appends fail with ErrDiskFull (nothing written, no
//     sticky store error, no crash);
//   - once space returns (filler deleted), ingest resumes;
//   - after the replica catches up: every acknowledged telemetry event is
//     at the centre exactly once; every acknowledged video event is at the
//     centre, still local, or inside a gap marker that reached the centre;
//   - the store reopens and reads back cleanly.
func TestDiskFull(t *testing.T) { runDiskFull(t, newMemCentre()) }

// runDiskFull is TestDiskFull's body against any central replica (an
// end-to-end test passes one built on the sync replicator and JetStream).
func runDiskFull(t *testing.T, centre replica) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EDGE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed=%d", seed)

	const (
		fsSize  = 96 << 20
		minFree = 24 << 20 // the store's hard floor
		shedAt  = 40 << 20
		retain  = 56 << 20
	)
	sfs := newSmallFS(t, fsSize)
	storeDir := sfs.Dir + "/store"
	opts := localstream.Options{MemTableSize: 8 << 20, ValueLogFileSize: 16 << 20, MinFreeBytes: minFree,
		FreeSpace: sfs.Free, Logger: quietLogger()}
	store, err := localstream.Open(storeDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			store.Close()
		}
	})
	video, _ := store.CreateStream("video", localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
	tele, _ := store.CreateStream("telemetry", localstream.StreamConfig{})
	health, err := store.CreateStream("health", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pressure, err := NewPressure(store, PressureConfig{
		RetainBelow: Threshold{Bytes: retain}, ShedBelow: Threshold{Bytes: shedAt}, Interval: 50 * time.Millisecond,
		Policy:       []ShedRule{{Stream: "video", AllowUnreplicated: true}, {Stream: "telemetry"}, {Stream: "health"}},
		ShedFraction: 0.2, MinShedEvents: 8, DiskSpace: sfs.Space, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sampler, err := NewSampler(HealthConfig{Agent: "gs-1", DataDir: storeDir, Interval: 50 * time.Millisecond,
		Logger: quietLogger()}, health, nil)
	if err != nil {
		t.Fatal(err)
	}
	sfs.Fill(t, 50<<20)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	goRun := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	goRun(func(ctx context.Context) { pressure.Run(ctx) })
	goRun(func(ctx context.Context) { sampler.Run(ctx) })

	// The replica: telemetry and health keep up, video lags (a slow uplink).
	var replErr error
	replCtx, stopRepl := context.WithCancel(ctx)
	replDone := make(chan struct{})
	go func() { defer close(replDone); replErr = centre.Run(replCtx, store) }()
	defer stopRepl()

	load := &ingestLoad{video: video, tele: tele, rng: rand.New(rand.NewPCG(seed, seed)),
		refused: map[string]uint64{}, ackedN: map[string]uint64{}}
	var loadStop atomic.Bool
	stopLoad := func() { loadStop.Store(true) }
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); load.run(&loadStop) }()
	defer stopLoad()

	// Phase 1: pressure. Video is shed (gap markers), telemetry is not.
	testkit.WaitFor(t, time.Minute, "video shed under disk pressure", func() bool {
		ps := pressure.Stats()
		vs := ps.Streams["video"]
		a, r, _ := load.counts()
		logEvery(t, "phase 1: state %s free %d MiB, video %+v, pending markers %d, acked %v, refused %v",
			ps.State, ps.FreeBytes>>20, vs, ps.PendingMarkers, a, r)
		return vs.Sheds >= 2 && vs.GapMarkers+uint64(ps.PendingMarkers) > 0
	})
	p1 := pressure.Stats()
	t.Logf("phase 1: state %s free %d MiB, video %+v, telemetry %+v", p1.State, p1.FreeBytes>>20,
		p1.Streams["video"], p1.Streams["telemetry"])

	// Phase 2: another process fills the disk to below the floor: appends
	// are refused, the store stays healthy.
	_, refused0, _ := load.counts()
	sfs.Fill(t, minFree-6<<20)
	testkit.WaitFor(t, time.Minute, "appends refused at the floor", func() bool {
		_, r, _ := load.counts()
		return r["video"] > refused0["video"]+5 && r["telemetry"] > refused0["telemetry"]+5
	})
	if err := store.Err(); err != nil {
		t.Fatalf("store failed at the floor: %v", err)
	}
	testkit.WaitFor(t, time.Minute, "health samples refused", func() bool { return sampler.Stats().AppendErrors > 0 })
	acked2, refused2, _ := load.counts()
	t.Logf("phase 2: acked %v, refused %v, store %+v", acked2, refused2, store.Stats())

	// Phase 3: space returns; ingest recovers.
	sfs.Unfill(t)
	testkit.WaitFor(t, time.Minute, "ingest after space returned", func() bool {
		a, _, _ := load.counts()
		return a["video"] >= acked2["video"]+10 && a["telemetry"] >= acked2["telemetry"]+10
	})
	stopLoad()
	<-loadDone
	acked, refused, err := load.counts()
	if err != nil {
		t.Fatalf("ingest failed other than disk full: %v", err)
	}
	t.Logf("ingest: acked %v, refused %v", acked, refused)

	// Drain: the replica catches up with everything, gap markers included.
	stopRepl()
	<-replDone
	if replErr != nil {
		t.Fatalf("replica: %v", replErr)
	}
	cancel()
	wg.Wait()
	if _, err := pressure.Check(context.Background()); err != nil { // pending carried markers, if any
		t.Logf("final check: %v", err)
	}
	if err := centre.Drain(context.Background(), store); err != nil {
		t.Fatal(err)
	}
	ps := pressure.Stats()
	t.Logf("pressure: %+v", ps)
	if ps.PendingMarkers != 0 || ps.MarkersLost != 0 {
		t.Fatalf("gap markers still pending or lost: %+v", ps)
	}
	if vs, ts := ps.Streams["video"], ps.Streams["telemetry"]; vs.ShedEvents == 0 || vs.ShedUnreplicated == 0 || ts.ShedEvents != 0 {
		t.Fatalf("policy: video %+v, telemetry %+v", vs, ts)
	}

	verifyDiskFull(t, load.acked, centre, video, tele)

	// The store reopens and reads back what it held.
	localV, localT := len(readAll(t, video)), len(readAll(t, tele))
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	opts.FreeSpace = nil // the filesystem is free again
	reopened := rigs.OpenStore(t, storeDir, opts)
	for name, want := range map[string]int{"video": localV, "telemetry": localT} {
		st, err := reopened.Stream(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(readAll(t, st)); got != want {
			t.Fatalf("%s after reopen: %d events, %d before", name, got, want)
		}
	}
}

// verifyDiskFull checks every acknowledged event against the policy.
func verifyDiskFull(t *testing.T, acked []ack, centre replica, video, tele *localstream.Stream) {
	t.Helper()
	type span struct {
		seg      localstream.SegmentID
		from, to uint64
	}
	atCentre := map[string]int{}
	gaps := map[string][]span{} // by routing key
	markers := 0
	for _, name := range []string{"video", "telemetry"} {
		for _, r := range centre.Records(name) {
			if r.Flags.Has(localstream.FlagGap) {
				var g localstream.Gap
				if err := json.Unmarshal(r.Payload, &g); err != nil {
					t.Fatalf("gap marker at centre: %v", err)
				}
				if name != "video" || g.Reason != ShedReason || g.From.Segment != g.To.Segment {
					t.Fatalf("unexpected gap marker in %s: %+v", name, g)
				}
				gaps[r.RoutingKey] = append(gaps[r.RoutingKey], span{g.From.Segment, g.From.Offset, g.To.Offset})
				markers++
				continue
			}
			atCentre[payloadID(r.Payload)]++
		}
	}
	local := map[string]bool{}
	for _, st := range []*localstream.Stream{video, tele} {
		for _, r := range readAll(t, st) {
			local[payloadID(r.Payload)] = true
		}
	}
	if markers == 0 {
		t.Fatal("no gap marker reached the centre")
	}
	var inGap, videoAcked int
	for _, a := range acked {
		if n := atCentre[a.id]; n > 1 {
			t.Fatalf("%s at the centre %d times", a.id, n)
		}
		if a.stream == "telemetry" {
			if atCentre[a.id] != 1 {
				t.Fatalf("acknowledged telemetry %s at %s lost (local %v)", a.id, a.pos, local[a.id])
			}
			continue
		}
		videoAcked++
		if atCentre[a.id] == 1 || local[a.id] {
			continue
		}
		covered := false
		for _, g := range gaps[a.key] {
			covered = covered || (g.seg == a.pos.Segment && g.from <= a.pos.Offset && a.pos.Offset <= g.to)
		}
		if !covered {
			t.Fatalf("acknowledged video %s at %s neither at the centre, nor local, nor in a gap", a.id, a.pos)
		}
		inGap++
	}
	t.Logf("verified: %d gap markers at the centre, %d of %d acknowledged video events shed inside gaps", markers, inGap, videoAcked)
	if inGap == 0 {
		t.Fatal("no acknowledged video event was shed: the test did not exercise shedding")
	}
}
