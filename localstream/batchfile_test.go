package localstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// appendTelemetry appends n events of size random bytes for drones
// d0…d(drones-1), all in flight at once so that the committer batches
// them, and adds their payloads to want per drone in append order.
func appendTelemetry(t *testing.T, st *Stream, rng *rand.Rand, n, drones, size int, want map[string][][]byte) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		key := fmt.Sprint("d", i%drones)
		want[key] = append(want[key], p)
		ev := Event{RoutingKey: key, Writer: "gs1/mqtt/" + key, ContentType: "application/octet-stream",
			Headers: []Header{{Key: "mqtt-topic", Value: "tel/" + key}}, Payload: p}
		if err := st.AppendAsync(context.Background(), ev, func(_ Position, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// checkPayloads reads st from its head and compares each drone's payloads
// with want[key][from[key]:].
func checkPayloads(t *testing.T, st *Stream, want map[string][][]byte, from map[string]int) {
	t.Helper()
	got := map[string][][]byte{}
	for _, r := range readAll(t, st) {
		got[r.RoutingKey] = append(got[r.RoutingKey], r.Payload)
	}
	for key, w := range want {
		w = w[from[key]:]
		if len(got[key]) != len(w) {
			t.Fatalf("%s: %d events read, want %d", key, len(got[key]), len(w))
		}
		for i := range w {
			if !slices.Equal(got[key][i], w[i]) {
				t.Fatalf("%s: event %d differs", key, from[key]+i)
			}
		}
	}
}

// storedVersions counts the stream's data entries in Badger by version
// byte and returns the largest version 5 value.
func storedVersions(t *testing.T, s *Store, stream string) (map[byte]int, int) {
	t.Helper()
	versions, largest := map[byte]int{}, 0
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: append([]byte{prefixData, byte(len(stream))}, stream...)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := it.Item().Value(func(v []byte) error {
				versions[v[0]]++
				if v[0] == recordVersionBatchFile {
					largest = max(largest, len(v))
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return versions, largest
}

func payloadFiles(t *testing.T, dir string) (names []string, bytes int64) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, payloadDir, "*"))
	for _, f := range m {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		bytes += fi.Size()
	}
	return m, bytes
}

// TestBatchFiles: a commit's record batches go to the stream's batch file
// and Badger holds references of a few bytes; every event reads back, in
// order, before and after a reopen; a truncation deletes the batch files
// it passed, leaving at most the stated bound (two batch files).
func TestBatchFiles(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 5))
	dir := t.TempDir()
	opts := Options{ValueLogFileSize: 4 << 20, MinFreeBytes: -1}
	fileSize := batchFileSize(opts.ValueLogFileSize)
	s := openStore(t, dir, opts)
	st := mustStream(t, s, "tel", 2)
	want := map[string][][]byte{}
	const rounds, perRound = 24, 2000 // 48,000 × 200 B
	for range rounds {
		appendTelemetry(t, st, rng, perRound, 8, 200, want)
	}
	versions, largest := storedVersions(t, s, "tel")
	files, written := payloadFiles(t, dir)
	t.Logf("%d commits; entries by version %v, largest reference %d bytes; %d batch files, %d bytes",
		s.Stats().Commits, versions, largest, len(files), written)
	if versions[recordVersionBatchFile] == 0 || versions[recordVersionBatch]+versions[recordVersionBatchS2] != 0 {
		t.Fatalf("entries by version %v: want every batch in a batch file (version %d)", versions, recordVersionBatchFile)
	}
	if largest > 24 {
		t.Fatalf("a batch file reference of %d bytes", largest)
	}
	if int64(len(files)) < written/fileSize || len(files) < 4 {
		t.Fatalf("%d batch files for %d bytes in files of %d", len(files), written, fileSize)
	}
	for _, f := range files {
		if fi, _ := os.Stat(f); fi.Size() > fileSize {
			t.Fatalf("%s: %d bytes, more than a batch file's %d", f, fi.Size(), fileSize)
		}
	}
	checkPayloads(t, st, want, nil)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, opts)
	st, _ = s.Stream("tel")
	checkPayloads(t, st, want, nil)

	// Truncate all but the last 6,000 events: the batch files before the
	// cut go, up to the bound.
	cut := cutAfter(t, st, rounds*perRound-6000)
	from := map[string]int{}
	tail := st.TailCut()
	r, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		t.Fatal(err)
	}
	for r.Cut().String() != cut.String() {
		rec, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		from[rec.RoutingKey]++
	}
	r.Close()
	if err := st.SetCommittedCut("central", cut); err != nil {
		t.Fatal(err)
	}
	if err := st.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	left, kept := payloadFiles(t, dir)
	t.Logf("after truncating to the last 6,000 events: %d batch files, %d bytes", len(left), kept)
	if bound := written/8 + 2*fileSize; kept > bound {
		t.Fatalf("%d bytes of batch files kept for an eighth of the events, bound %d", kept, bound)
	}
	checkPayloads(t, st, want, from)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, opts)
	st, _ = s.Stream("tel")
	checkPayloads(t, st, want, from)
}

// TestBatchFileDamage: a batch file whose bytes changed, that lost its
// tail, or that is gone, gives a reader an error naming the damage —
// never other events, a panic or a silent skip.
func TestBatchFileDamage(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(path string) error
		want   error
	}{
		{"a flipped byte", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x40
			return os.WriteFile(p, b, 0o644)
		}, ErrCorruptRecord},
		{"a lost tail", func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, fi.Size()/2)
		}, ErrCorruptRecord},
		{"the file gone", os.Remove, ErrTruncated},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, Options{MinFreeBytes: -1})
			st := mustStream(t, s, "tel", 1)
			appendTelemetry(t, st, rand.New(rand.NewPCG(1, 1)), 2000, 4, 200, map[string][][]byte{})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			files, _ := payloadFiles(t, dir)
			if len(files) != 1 {
				t.Fatalf("batch files %v, want one", files)
			}
			if err := c.damage(files[0]); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, Options{MinFreeBytes: -1})
			st, _ = s.Stream("tel")
			_, err := st.ReadAll()
			if !errors.Is(err, c.want) {
				t.Fatalf("read after %s: %v, want %v", c.name, err, c.want)
			}
			t.Logf("%s: %v", c.name, err)
		})
	}
}

// FuzzBatchFileRef: a version 5 entry of any bytes, against a store with
// a real batch file, is read or refused with ErrCorruptRecord or
// ErrTruncated, records in order within the window, never a panic or an
// allocation beyond the bound.
func FuzzBatchFileRef(f *testing.F) {
	dir := f.TempDir()
	s, err := Open(dir, Options{MinFreeBytes: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	st, err := s.CreateStream("tel", StreamConfig{})
	if err != nil {
		f.Fatal(err)
	}
	errs := make(chan error, 300)
	for i := range 300 {
		ev := Event{RoutingKey: "d", Writer: "w", Payload: []byte(fmt.Sprintf(`{"seq":%d}`, i))}
		if err := st.AppendAsync(context.Background(), ev, func(_ Position, err error) { errs <- err }); err != nil {
			f.Fatal(err)
		}
	}
	for range 300 {
		if err := <-errs; err != nil {
			f.Fatal(err)
		}
	}
	err = s.db.View(func(txn *badger.Txn) error { // the real references as seeds
		it := txn.NewIterator(badger.IteratorOptions{Prefix: segmentPrefix("tel", 0)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, _ := it.Item().ValueCopy(nil)
			if v[0] == recordVersionBatchFile {
				f.Add(v, offsetOf(it.Item().Key()), uint64(0), uint64(1000))
			}
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{recordVersionBatchFile, 2, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0}, uint64(5), uint64(0), uint64(9))
	f.Add([]byte{recordVersionBatchFile, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 0, 9, 0, 0, 0, 0}, uint64(5), uint64(0), uint64(9))
	f.Fuzz(func(t *testing.T, v []byte, last, from, to uint64) {
		v = append([]byte{recordVersionBatchFile}, v[min(1, len(v)):]...)
		prev, n := uint64(0), 0
		_, err := s.entryRecordsOf("tel", last, v, from, to, func(off uint64, rec []byte) bool {
			if off < from || off >= to || off > last || (n > 0 && off != prev+1) {
				t.Fatalf("offset %d after %d (%d records) outside [%d, %d) or past %d", off, prev, n, from, to, last)
			}
			prev, n = off, n+1
			decodeRecordRef(rec)
			return true
		})
		if err != nil && !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("error %v", err)
		}
	})
}

// TestReadersRaceBatchFileDeletion: readers reading from the head while
// sheds move it and delete the batch files behind it never fail: a read
// whose file a shed deleted under it reads again from the new head (the
// entry it was reading is gone too), as readers of batches in Badger did.
func TestReadersRaceBatchFileDeletion(t *testing.T) {
	seed := testSeed(t)
	s := openStore(t, t.TempDir(), Options{ValueLogFileSize: 4 << 20, MinFreeBytes: -1}) // 1 MiB batch files
	st := mustStream(t, s, "tel", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg stdsync.WaitGroup
	errs := make(chan error, 16)
	var sheds, reads, files atomic.Int64
	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			appendTelemetry(t, st, rng, 500, 4, 200, map[string][][]byte{})
		}
	}()
	wg.Add(1)
	go func() { // shedder: keeps ~1,000 events
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 2))
		for ctx.Err() == nil {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			tail := st.TailCut().Positions[0]
			if tail < 1000 || st.HeadCut().Positions[0]+1000 > tail {
				continue
			}
			n, _ := payloadFiles(t, s.Dir())
			if _, err := st.Shed(ctx, StreamCut{Stream: "tel", Positions: map[SegmentID]uint64{0: tail - 1000}}, "test"); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("shed: %w", err)
				return
			}
			if m, _ := payloadFiles(t, s.Dir()); len(m) < len(n) {
				files.Add(int64(len(n) - len(m)))
			}
			sheds.Add(1)
		}
	}()
	for range 2 { // readers from the head to the tail, again and again
		wg.Add(1)
		go func() {
			defer wg.Done()
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
		}()
	}
	// At least 3 s, and until 20 sheds have deleted 5 files (a loaded
	// machine writes more slowly), at most 60 s.
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < 3*time.Second || (sheds.Load() < 20 || files.Load() < 5) && time.Since(start) < time.Minute {
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
	t.Logf("%d sheds deleted %d batch files; %d events read", sheds.Load(), files.Load(), reads.Load())
	if sheds.Load() < 20 || files.Load() < 5 {
		t.Fatalf("%d sheds deleted %d batch files: the race was not exercised", sheds.Load(), files.Load())
	}
}

// TestShedDeletesTheBatchFileBeingRead forces the race above: a shed that
// passes a reader's position deletes the batch file the reader is about to
// read. The reader reads on from the new head — events from there in
// order, the gap markers of the shed, no error.
func TestShedDeletesTheBatchFileBeingRead(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{ValueLogFileSize: 1 << 20, MinFreeBytes: -1}) // 1 MiB batch files
	st := mustStream(t, s, "tel", 1)
	want := map[string][][]byte{}
	rng := rand.New(rand.NewPCG(9, 9))
	for st.TailCut().Positions[0] < 20000 { // several files
		appendTelemetry(t, st, rng, 2000, 4, 200, want)
	}
	if files, _ := payloadFiles(t, s.Dir()); len(files) < 3 {
		t.Fatalf("batch files %v, want at least 3", files)
	}
	tail := st.TailCut().Positions[0]
	cut := StreamCut{Stream: "tel", Positions: map[SegmentID]uint64{0: tail - 100}}
	shed := make(chan error, 1)
	testHookBatchRead = func() {
		testHookBatchRead = nil // once; the reader's goroutine is the only caller
		_, err := st.Shed(context.Background(), cut, "test")
		shed <- err
	}
	defer func() { testHookBatchRead = nil }()
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
	t.Logf("read %d events and %d gap markers; the shed cut at %d of %d", data, gaps, tail-100, tail)
	if data < 100 || gaps == 0 || next != st.TailCut().Positions[0]-uint64(gaps) {
		t.Fatalf("read %d events up to offset %d and %d gap markers, want the last 100 and the shed's markers", data, next, gaps)
	}
}

// TestBatchFilesOpenAnOlderStore: a store whose batches are in Badger
// (versions 3 and 4, as written before batch files) opens, takes new
// batches in batch files, and reads both back in order, also after a
// truncation that ends in the older entries and one that ends in the newer.
func TestBatchFilesOpenAnOlderStore(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MinFreeBytes: -1}
	testKeepBatchesInBadger = true
	s := openStore(t, dir, opts)
	st := mustStream(t, s, "tel", 1)
	want := map[string][][]byte{}
	rng := rand.New(rand.NewPCG(4, 4))
	appendTelemetry(t, st, rng, 3000, 4, 200, want)
	testKeepBatchesInBadger = false
	before, _ := storedVersions(t, s, "tel")
	if before[recordVersionBatchFile] != 0 || before[recordVersionBatchS2] == 0 {
		t.Fatalf("older store's entries by version %v, want batches in Badger", before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, opts)
	st, _ = s.Stream("tel")
	appendTelemetry(t, st, rng, 3000, 4, 200, want)
	after, _ := storedVersions(t, s, "tel")
	t.Logf("entries by version: older store %v, after appending to it %v", before, after)
	if after[recordVersionBatchFile] == 0 || after[recordVersionBatchS2] != before[recordVersionBatchS2] {
		t.Fatalf("entries by version %v after appending to a store with %v", after, before)
	}
	checkPayloads(t, st, want, nil)
	from := map[string]int{}
	for _, n := range []int{1500, 4500} { // inside the older entries, then inside the newer
		cut := cutAfter(t, st, n-from["d0"]-from["d1"]-from["d2"]-from["d3"])
		for k := range want {
			from[k] = n / 4
		}
		if err := st.SetCommittedCut("central", cut); err != nil {
			t.Fatal(err)
		}
		if err := st.Truncate(cut); err != nil {
			t.Fatal(err)
		}
		checkPayloads(t, st, want, from)
	}
}
