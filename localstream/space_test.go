package localstream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// fillVideo appends n video chunks of size bytes (random: Badger cannot
// compress them) for two drones, plus one small telemetry event each, and
// returns the payload bytes appended to video.
func fillVideo(t testing.TB, video, tele *Stream, rng *rand.Rand, n, size int) int64 {
	t.Helper()
	ctx := context.Background()
	var total int64
	for i := range n {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		drone := fmt.Sprintf("d%d", i%2)
		if _, err := video.Append(ctx, Event{RoutingKey: drone, Writer: "video/" + drone, Payload: p}); err != nil {
			t.Fatal(err)
		}
		if _, err := tele.Append(ctx, Event{RoutingKey: drone, Writer: "telemetry/" + drone, Payload: []byte(`{"alt":1}`)}); err != nil {
			t.Fatal(err)
		}
		total += int64(size)
	}
	return total
}

// TestReclaimFreesShedAndTruncated proves rule 14 at the store: the bytes
// of shed and truncated events leave the disk (allocated blocks under the
// store's directory, as du counts them) when Reclaim returns, less the
// stated bound of 2 × ValueLogFileSize. Before Reclaim (Badger's value-log
// GC alone, as the store did before) nothing came back: the deleted chunks
// stayed in the value log.
func TestReclaimFreesShedAndTruncated(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	const vlogFile = 4 << 20
	s := openStore(t, t.TempDir(), Options{ValueLogFileSize: vlogFile, MinFreeBytes: -1})
	video, tele := mustStream(t, s, "video", 2), mustStream(t, s, "telemetry", 1)
	written := fillVideo(t, video, tele, rng, 480, 64<<10) // 30 MiB
	before := s.DiskUsage()
	if before < written {
		t.Fatalf("store occupies %d bytes, less than the %d written", before, written)
	}

	// Shed the oldest ~80% of the video (no sink: all unreplicated).
	cut := cutAfter(t, video, 384)
	res, err := video.Shed(context.Background(), cut, "test")
	if err != nil {
		t.Fatal(err)
	}
	rr, err := s.Reclaim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	freed := before - s.DiskUsage()
	t.Logf("shed %d events (%d bytes): %d bytes freed (reclaim %+v)", res.Events, res.Bytes, freed, rr)
	if want := int64(res.Bytes) - 2*vlogFile; freed < want {
		t.Fatalf("shed %d bytes, %d freed: want at least %d (bound 2 × %d)", res.Bytes, freed, want, vlogFile)
	}

	// Truncation of replicated data frees its bytes the same way.
	replicated := video.TailCut()
	if err := video.SetCommittedCut("central", replicated); err != nil {
		t.Fatal(err)
	}
	more := fillVideo(t, video, tele, rng, 160, 64<<10)
	mid := s.DiskUsage()
	if err := video.Truncate(replicated); err != nil {
		t.Fatal(err)
	}
	rr, err = s.Reclaim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	truncated, freed := written-int64(res.Bytes), mid-s.DiskUsage()
	t.Logf("wrote %d more; truncated %d bytes: %d freed (reclaim %+v)", more, truncated, freed, rr)
	if want := truncated - 2*vlogFile; freed < want {
		t.Fatalf("truncated %d bytes, %d freed: want at least %d", truncated, freed, want)
	}

	// What is left reads back in full, and again after a reopen.
	if got := len(readAll(t, video)); got != 160 {
		t.Fatalf("video holds %d events after reclaim, want 160", got)
	}
	if got := len(readAll(t, tele)); got != 640 {
		t.Fatalf("telemetry holds %d events after reclaim, want 640", got)
	}
}

// cutAfter returns the cut after the first n events from st's head.
func cutAfter(t testing.TB, st *Stream, n int) StreamCut {
	t.Helper()
	tail := st.TailCut()
	r, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range n {
		if _, err := r.TryNext(); err != nil {
			t.Fatal(err)
		}
	}
	return r.Cut()
}

// countingHandler counts log records by level and message.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Level.String()+" "+r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, v := range h.n {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// TestBelowFloorReported: a store refusing appends says so (BelowFloor,
// Stats) and logs an error once per spell (repeated at most every 30 s),
// and an info line when space is back: it was silent before.
func TestBelowFloorReported(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 30)
	h := &countingHandler{n: map[string]int{}}
	s := openStore(t, t.TempDir(), Options{MinFreeBytes: 8 << 20, Logger: slog.New(h),
		FreeSpace: func(string) (int64, error) { return free.Load(), nil }})
	if s.BelowFloor() || s.Stats().BelowFloor {
		t.Fatal("below the floor with 1 GiB free")
	}
	free.Store(1 << 20)
	time.Sleep(time.Second) // four measurements below the floor
	if !s.BelowFloor() || !s.Stats().BelowFloor || s.Stats().MinFreeBytes != 8<<20 {
		t.Fatalf("not below the floor: %+v", s.Stats())
	}
	if n := h.count("ERROR localstream: free space below min_free_bytes"); n != 1 {
		t.Fatalf("%d errors logged for one spell below the floor, want 1", n)
	}
	free.Store(1 << 30)
	time.Sleep(600 * time.Millisecond)
	if s.BelowFloor() || h.count("INFO localstream: free space back above min_free_bytes") != 1 {
		t.Fatalf("back above the floor: below %v, logs %v", s.BelowFloor(), h.n)
	}
}

// BenchmarkReclaim measures what giving shed space back costs in steady
// state: 2 video drones (64 KiB chunks) and telemetry (teleRatio small
// events per chunk) fill the store to 48 MiB of video; then each round
// appends a tenth more, sheds the oldest tenth of the video and reclaims.
// Reported: bytes written to free a byte (Reclaim's compactions; payload
// files are deleted whole, nothing is rewritten), bytes freed per byte
// shed, the time of one shed + reclaim, and the store's size at the end
// against the 48 MiB of video it holds.
//
//	go test -run '^$' -bench BenchmarkReclaim -benchtime 60x ./localstream
func BenchmarkReclaim(b *testing.B) {
	for _, c := range []struct {
		name      string
		teleRatio int
	}{{"tele-1-per-chunk", 1}, {"tele-20-per-chunk", 20}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			s, err := Open(b.TempDir(), Options{ValueLogFileSize: 4 << 20, MinFreeBytes: -1, Durability: DurabilityPeriodic})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			video, _ := s.CreateStream("video", StreamConfig{Scaling: ScalingPolicy{MinSegments: 2}})
			tele, _ := s.CreateStream("telemetry", StreamConfig{})
			fill := func(n int) {
				for range c.teleRatio - 1 {
					fillTele(b, tele, n)
				}
				fillVideo(b, video, tele, rng, n, 64<<10)
			}
			fill(768) // 48 MiB of video
			var written, freed, shed int64
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				fill(77)
				before := s.DiskUsage()
				b.StartTimer()
				res, err := video.Shed(context.Background(), cutAfter(b, video, 77), "bench")
				if err != nil {
					b.Fatal(err)
				}
				rr, err := s.Reclaim(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				written, freed, shed = written+rr.Written, freed+before-s.DiskUsage(), shed+int64(res.Bytes)
				b.StartTimer()
			}
			b.ReportMetric(float64(written)/float64(freed), "written/freed")
			b.ReportMetric(float64(freed)/float64(shed), "freed/shed")
			b.ReportMetric(float64(s.DiskUsage())/float64(768<<16), "size/video")
			b.Logf("%d rounds: shed %d MiB, freed %d MiB, wrote %d MiB; the store occupies %d MiB for 48 MiB of video",
				b.N, shed>>20, freed>>20, written>>20, s.DiskUsage()>>20)
		})
	}
}

// fillTele appends n small telemetry events for two drones.
func fillTele(t testing.TB, tele *Stream, n int) {
	for i := range n {
		drone := fmt.Sprintf("d%d", i%2)
		if _, err := tele.Append(context.Background(), Event{RoutingKey: drone, Writer: "telemetry/" + drone, Payload: []byte(`{"alt":1,"lat":47.1,"lon":8.5}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPayloadFilesFollowSegments: large payloads live in payload files of
// their segment; a sealed segment's files go once its head passes them,
// a reopened store reads the old files and writes new ones, and files no
// index key names (a batch that never committed) are removed at Open.
func TestPayloadFilesFollowSegments(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{ValueLogFileSize: 1 << 20, MinFreeBytes: -1})
	st := mustStream(t, s, "video", 1)
	ctx := context.Background()
	big := func(i int) []byte {
		p := make([]byte, 64<<10)
		copy(p, fmt.Sprintf("chunk %d\n", i))
		return p
	}
	files := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, payloadDir, "*"))
		return m
	}
	for i := range 40 { // 2.5 MiB: three files of the first segment
		if _, err := st.Append(ctx, Event{RoutingKey: fmt.Sprintf("d%d", i%4), Writer: "w", Payload: big(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(files()); n != 3 {
		t.Fatalf("%d payload files after 2.5 MiB in 1 MiB files, want 3: %v", n, files())
	}
	if _, err := st.Split(st.Topology().Open()[0].ID, 2); err != nil {
		t.Fatal(err)
	}
	for i := 40; i < 48; i++ {
		if _, err := st.Append(ctx, Event{RoutingKey: fmt.Sprintf("d%d", i%4), Writer: "w", Payload: big(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Shed everything of the sealed segment: its files go, the successors' stay.
	var sealed SegmentID
	for _, sg := range st.Topology().Segments {
		if sg.Sealed {
			sealed = sg.ID
		}
	}
	if _, err := st.Shed(ctx, cutAfter(t, st, 40), "test"); err != nil {
		t.Fatal(err)
	}
	if st.Topology().Segments[sealed].Start != 40 {
		t.Fatalf("sealed segment not shed to its end: %+v", st.Topology().Segments[sealed])
	}
	left := files()
	if len(left) != 2 {
		t.Fatalf("after shedding the sealed segment: payload files %v, want the 2 of its successors", left)
	}
	os.WriteFile(filepath.Join(dir, payloadDir, "video.0000000099"), []byte("never committed"), 0o644)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, dir, Options{ValueLogFileSize: 1 << 20, MinFreeBytes: -1})
	if got := files(); !slices.Equal(got, left) {
		t.Fatalf("after reopen: payload files %v, want %v (the uncommitted one removed)", got, left)
	}
	st2, _ := s2.Stream("video")
	if _, err := st2.Append(ctx, Event{RoutingKey: "d0", Writer: "w", Payload: big(48)}); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, st2)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[payloadIDOf(r.Payload)] = true
	}
	for i := 40; i <= 48; i++ {
		if !seen[fmt.Sprintf("chunk %d", i)] {
			t.Fatalf("chunk %d lost after reopen (have %d records)", i, len(recs))
		}
	}
	data := 0
	for _, r := range recs {
		if !r.Flags.Has(FlagGap) {
			data++
		}
	}
	if data != 9 { // 8 chunks of the successors and the new one
		t.Fatalf("%d data records after reopen, want 9", data)
	}
}

func payloadIDOf(p []byte) string {
	s, _, _ := strings.Cut(string(p), "\n")
	return s
}
