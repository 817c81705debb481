package localstream

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
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
	seed := testSeed(t)
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
	t.Logf("shed %d events (%d bytes); reclaim %+v freed %d bytes in %v", res.Events, res.Bytes, rr, rr.Freed(), rr.Took)
	if want := int64(res.Bytes) - 2*vlogFile; rr.Freed() < want {
		t.Fatalf("shed %d bytes, reclaim freed %d: want at least %d (bound 2 × %d)", res.Bytes, rr.Freed(), want, vlogFile)
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
	truncated := written - int64(res.Bytes)
	t.Logf("wrote %d more; truncated %d bytes; reclaim %+v freed %d (usage %d → %d)", more, truncated, rr, rr.Freed(), mid, s.DiskUsage())
	if want := truncated - 2*vlogFile; rr.Freed() < want {
		t.Fatalf("truncated %d bytes, reclaim freed %d: want at least %d", truncated, rr.Freed(), want)
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
func cutAfter(t *testing.T, st *Stream, n int) StreamCut {
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
