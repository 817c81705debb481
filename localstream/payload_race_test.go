package localstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// appendChunks appends n video chunks of size random bytes for drones
// d0…d3, all in flight at once.
func appendChunks(st *Stream, rng *rand.Rand, n, size int) error {
	errs := make(chan error, n)
	for i := range n {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		key := fmt.Sprint("d", i%4)
		if err := st.AppendAsync(context.Background(), Event{RoutingKey: key, Writer: "video/" + key, Payload: p},
			func(_ Position, err error) { errs <- err }); err != nil {
			return err
		}
	}
	for range n {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func payloadFileCount(dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, payloadDir, "*"))
	return len(m)
}

// TestShedDeletesThePayloadFileBeingRead forces a race of readers and
// retention: a shed that passes a reader's position deletes the payload
// file the reader is about to read. The reader reads on from the new head
// — the events from there in order and the shed's gap markers — where it
// failed with ErrTruncated before.
func TestShedDeletesThePayloadFileBeingRead(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{ValueLogFileSize: 1 << 20, MinFreeBytes: -1}) // 1 MiB payload files
	st := mustStream(t, s, "video", 1)
	if err := appendChunks(st, rand.New(rand.NewPCG(9, 9)), 256, 16<<10); err != nil { // 4 MiB
		t.Fatal(err)
	}
	if n := payloadFileCount(s.Dir()); n < 4 {
		t.Fatalf("%d payload files, want at least 4", n)
	}
	tail := st.TailCut().Positions[0]
	cut := StreamCut{Stream: "video", Positions: map[SegmentID]uint64{0: tail - 10}}
	shed := make(chan error, 1)
	testHookPayloadRead = func() {
		testHookPayloadRead = nil // once; the reader's goroutine is the only caller
		_, err := st.Shed(context.Background(), cut, "test")
		shed <- err
	}
	defer func() { testHookPayloadRead = nil }()
	r, err := st.NewReader(st.HeadCut(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var data, gaps int
	next := uint64(0)
	for {
		rec, err := r.TryNext()
		if errors.Is(err, ErrCaughtUp) {
			break
		}
		if err != nil {
			t.Fatalf("read after %d events: %v", data, err)
		}
		if rec.Flags.Has(FlagGap) {
			gaps++
			continue
		}
		if rec.Offset < next {
			t.Fatalf("offset %d after %d", rec.Offset, next)
		}
		next = rec.Offset + 1
		data++
	}
	if err := <-shed; err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d events and %d gap markers; the shed cut at %d of %d", data, gaps, tail-10, tail)
	if data < 10 || gaps == 0 || next != tail {
		t.Fatalf("read %d events up to offset %d and %d gap markers, want the last 10 up to %d and the shed's markers", data, next, gaps, tail)
	}
}

// TestReadersRacePayloadFileDeletion runs the race above unforced:
// readers reading from the head again and again while sheds move it and
// delete the payload files behind it never fail.
func TestReadersRacePayloadFileDeletion(t *testing.T) {
	seed := testkit.Seed(t)
	s := openStore(t, t.TempDir(), Options{ValueLogFileSize: 1 << 20, MinFreeBytes: -1})
	st := mustStream(t, s, "video", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var sheds, reads, deleted atomic.Int64
	wg.Go(func() { // writer: 16 KiB chunks
		rng := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			if err := appendChunks(st, rng, 32, 16<<10); err != nil {
				errs <- fmt.Errorf("append: %w", err)
				return
			}
		}
	})
	wg.Go(func() { // shedder: keeps ~64 chunks (1 MiB)
		rng := rand.New(rand.NewPCG(seed, 2))
		for ctx.Err() == nil {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			tail := st.TailCut().Positions[0]
			if tail < 64 || st.HeadCut().Positions[0]+64 > tail {
				continue
			}
			before := payloadFileCount(s.Dir())
			if _, err := st.Shed(ctx, StreamCut{Stream: "video", Positions: map[SegmentID]uint64{0: tail - 64}}, "test"); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("shed: %w", err)
				return
			}
			deleted.Add(int64(max(0, before-payloadFileCount(s.Dir()))))
			sheds.Add(1)
		}
	})
	for range 2 { // readers from the head to the tail, again and again
		wg.Go(func() {
			for ctx.Err() == nil {
				r, err := st.NewReader(st.HeadCut(), nil)
				if err != nil {
					errs <- err
					return
				}
				for {
					_, err := r.TryNext()
					if errors.Is(err, ErrCaughtUp) {
						break
					}
					if err != nil {
						errs <- fmt.Errorf("read: %w", err)
						r.Close()
						return
					}
					reads.Add(1)
				}
				r.Close()
				time.Sleep(time.Millisecond) // leave the writer room to fill files
			}
		})
	}
	// At least 3 s, and until 20 sheds have deleted 5 files (a loaded
	// machine writes more slowly), at most 60 s.
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < 3*time.Second || (sheds.Load() < 20 || deleted.Load() < 5) && time.Since(start) < time.Minute {
		select {
		case err := <-errs:
			cancel()
			wg.Wait()
			t.Fatal(err)
		case <-tick.C:
		}
	}
	cancel()
	wg.Wait()
	t.Logf("%d sheds deleted %d payload files; %d events read", sheds.Load(), deleted.Load(), reads.Load())
	if sheds.Load() < 20 || deleted.Load() < 5 {
		t.Fatalf("%d sheds deleted %d payload files: the race was not exercised", sheds.Load(), deleted.Load())
	}
}
