package localstream

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// batchValue encodes n records whose payloads are their offsets, the
// last at offset last, as the committer stores them.
func batchValue(t testing.TB, last uint64, n int) []byte {
	t.Helper()
	w := batchWriter{max: maxBatchEntry}
	for off := last + 1 - uint64(n); off <= last; off++ {
		ev := Event{RoutingKey: "d", Writer: "w", Payload: binary.BigEndian.AppendUint64(nil, off)}
		w.add("s", 3, off, appendRecord(nil, &ev))
	}
	var val []byte
	if err := w.each(func(k, v []byte) error {
		if want := dataKey("s", 3, last); !bytes.Equal(k, want) {
			t.Fatalf("key %x, want %x (the last offset's)", k, want)
		}
		val = v
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return val
}

func TestRecordBatchWindows(t *testing.T) {
	const last, n = 104, 5 // offsets 100 … 104
	for _, single := range []bool{false, true} {
		v, first := batchValue(t, last, n), uint64(last+1-n)
		if single {
			v, first = batchValue(t, last, 1), last
		}
		if single != (v[0] == recordVersion) {
			t.Fatalf("single %v: version %d", single, v[0])
		}
		for from := uint64(98); from <= last+2; from++ {
			for to := from; to <= last+2; to++ {
				var got []uint64
				more, err := entryRecords(last, v, from, to, func(off uint64, rec []byte) bool {
					ev, err := decodeRecord(rec)
					if err != nil || binary.BigEndian.Uint64(ev.Payload) != off {
						t.Fatalf("offset %d: %v %x", off, err, ev.Payload)
					}
					got = append(got, off)
					return true
				})
				if err != nil {
					t.Fatal(err)
				}
				var want []uint64
				for off := max(from, first); off < min(to, last+1); off++ {
					want = append(want, off)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("single %v [%d, %d): %v, want %v", single, from, to, got, want)
				}
				if wantMore := to > last; more != wantMore {
					t.Fatalf("single %v [%d, %d): more %v", single, from, to, more)
				}
			}
		}
	}
	// fn stops the scan.
	calls := 0
	if more, err := entryRecords(last, batchValue(t, last, n), 0, 1000, func(uint64, []byte) bool { calls++; return calls < 2 }); more || err != nil || calls != 2 {
		t.Fatalf("stopped scan: more %v err %v after %d calls", more, err, calls)
	}
	// Every truncation, a count beyond the key's offset, a nested batch
	// and trailing bytes are errors.
	v := batchValue(t, last, n)
	all := func(b []byte, last uint64) error {
		_, err := entryRecords(last, b, 0, 1<<63, func(uint64, []byte) bool { return true })
		return err
	}
	for k := 1; k < len(v); k++ {
		if err := all(v[:k], last); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("truncated to %d bytes: %v", k, err)
		}
	}
	if err := all(v, n-2); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("%d records ending at offset %d: %v", n, n-2, err)
	}
	if err := all(append(bytes.Clone(v), 0), last); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("trailing byte: %v", err)
	}
	nested := []byte{recordVersionBatch, 2, 1, recordVersionBatch, 1, recordVersionBatch}
	if err := all(nested, 9); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("nested batch: %v", err)
	}
}

func FuzzEntryRecords(f *testing.F) {
	w := batchWriter{max: maxBatchEntry}
	for off := uint64(7); off < 10; off++ {
		ev := Event{RoutingKey: "d", Writer: "w", Payload: []byte("x")}
		w.add("s", 0, off, appendRecord(nil, &ev))
	}
	w.each(func(_, v []byte) error { f.Add(v, uint64(9), uint64(8), uint64(100)); return nil })
	for off := uint64(0); off < 20; off++ { // compressed (version 4)
		ev := Event{RoutingKey: "drone", Writer: "gs/drone", Headers: []Header{{"topic", "tel/drone"}}, Payload: []byte("{}")}
		w.add("s", 0, off, appendRecord(nil, &ev))
	}
	w.each(func(_, v []byte) error { f.Add(v, uint64(19), uint64(3), uint64(100)); return nil })
	f.Add([]byte{3, 2, 1, 1, 1, 1}, uint64(1), uint64(0), uint64(2))
	f.Add([]byte{4, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}, uint64(1), uint64(0), uint64(2))
	f.Add([]byte{3, 0xff, 0xff, 0xff, 0xff, 0x0f}, uint64(1<<40), uint64(0), uint64(1<<63))
	f.Fuzz(func(t *testing.T, v []byte, last, from, to uint64) {
		prev, n := uint64(0), 0
		_, err := entryRecords(last, v, from, to, func(off uint64, rec []byte) bool {
			if off < from || off >= to || off > last || (n > 0 && off != prev+1) {
				t.Fatalf("offset %d after %d (%d records) outside [%d, %d) or past %d", off, prev, n, from, to, last)
			}
			prev, n = off, n+1
			decodeRecordRef(rec) // never panics (FuzzDecodeRecord)
			return true
		})
		if err != nil && !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("error %v", err)
		}
	})
}

// appendBatched appends n events at once (AppendAsync), so that the
// committer writes them in few record batches; the payload is the event's
// offset (a stream of one segment, nothing else appending).
func appendBatched(t *testing.T, st *Stream, n, keys int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	base := st.TailCut().Positions[0]
	for i := range n {
		wg.Add(1)
		off := base + uint64(i) // one segment: the event's offset
		ev := Event{RoutingKey: fmt.Sprint("d", i%keys), Writer: "w", EventTime: int64(off + 1), Payload: binary.BigEndian.AppendUint64(nil, off)}
		if err := st.AppendAsync(context.Background(), ev, func(_ Position, err error) {
			if err != nil {
				errs <- err
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// dataEntries returns the first and last offset of every stored data
// entry of a segment.
func dataEntries(t *testing.T, s *Store, stream string, seg SegmentID) [][2]uint64 {
	t.Helper()
	var out [][2]uint64
	prefix := segmentPrefix(stream, seg)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			last := offsetOf(it.Item().Key())
			first := last
			if err := it.Item().Value(func(v []byte) error {
				_, err := entryRecords(last, v, 0, 1<<63, func(off uint64, _ []byte) bool { first = min(first, off); return true })
				return err
			}); err != nil {
				return err
			}
			out = append(out, [2]uint64{first, last})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBatchesCutByTruncateAndShed: a truncation and a shed that end inside
// a record batch keep the batch, and nothing below the new head is read
// again — by a new reader, by a reader from an older cut, after a reopen.
func TestBatchesCutByTruncateAndShed(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	st := mustStream(t, s, "tele", 1)
	const n = 2000
	for range 4 { // at least four commits
		appendBatched(t, st, n/4, 4)
	}
	entries := dataEntries(t, s, "tele", 0)
	var straddle [][2]uint64 // batches of at least 3 records
	for _, e := range entries {
		if e[1]-e[0] >= 2 {
			straddle = append(straddle, e)
		}
	}
	t.Logf("%d events in %d entries, %d batches of 3 or more, %d commits", n, len(entries), len(straddle), s.Stats().Commits)
	if len(straddle) < 2 {
		t.Fatalf("the committer wrote %d entries for %d events at once: %v", len(entries), n, entries)
	}
	at := func(off uint64) StreamCut { return StreamCut{Stream: "tele", Positions: map[SegmentID]uint64{0: off}} }
	check := func(st *Stream, head uint64, wantGaps int) {
		t.Helper()
		got := readAll(t, st)
		gaps := 0
		next := head
		for _, r := range got {
			if r.Flags.Has(FlagGap) {
				gaps++
				continue
			}
			if r.Offset != next || binary.BigEndian.Uint64(r.Payload) != next {
				t.Fatalf("read offset %d (payload %x), want %d from head %d", r.Offset, r.Payload, next, head)
			}
			next++
		}
		if next != n || gaps != wantGaps {
			t.Fatalf("read up to %d with %d gap markers, want %d and %d", next, gaps, n, wantGaps)
		}
	}
	old, err := st.NewReader(st.HeadCut(), nil) // reads from 0 after the shed
	if err != nil {
		t.Fatal(err)
	}
	// Truncate into the middle of the first batch.
	cut1 := straddle[0][0] + 1
	if err := st.SetCommittedCut("central", at(cut1)); err != nil {
		t.Fatal(err)
	}
	if err := st.Truncate(at(cut1)); err != nil {
		t.Fatal(err)
	}
	check(st, cut1, 0)
	// Shed into the middle of a later batch.
	cut2 := straddle[len(straddle)-1][0] + 1
	res, err := st.Shed(context.Background(), at(cut2), "disk_pressure")
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != cut2-cut1 || res.Unreplicated != cut2-cut1 {
		t.Fatalf("shed [%d, %d): %+v", cut1, cut2, res)
	}
	check(st, cut2, 4)
	after := dataEntries(t, s, "tele", 0)
	if after[0][0] >= cut2 || after[0][1] < cut2 {
		t.Fatalf("the batch the shed cut through is gone: first entry %v, cut %d", after[0], cut2)
	}
	rec, err := old.TryNext()
	if err != nil || rec.Offset != cut2 {
		t.Fatalf("a reader from before the shed read %v, %v; want offset %d", rec.Position, err, cut2)
	}
	s.Close()
	s2 := openStore(t, dir, Options{})
	st2, err := s2.Stream("tele")
	if err != nil {
		t.Fatal(err)
	}
	check(st2, cut2, 4)
	if tail := st2.TailCut(); tail.Positions[0] != n+4 {
		t.Fatalf("tail after reopen %v, want %d", tail, n+4)
	}
}

// TestJournalOneEntryPerCommit: the journal bytes of appends committed
// together are one entry, in append order; sequences increase across
// commits and reopens; a journal entry is durable with its events.
func TestJournalOneEntryPerCommit(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	st := mustStream(t, s, "tele", 2)
	const prefix = "j/client/"
	write := func(from, n int) {
		var wg sync.WaitGroup
		for i := from; i < from+n; i++ {
			wg.Add(1)
			ev := Event{RoutingKey: fmt.Sprint("d", i%3), Writer: "w", Payload: []byte{1}}
			err := st.AppendAsync(context.Background(), ev, func(_ Position, err error) {
				if err != nil {
					t.Error(err)
				}
				wg.Done()
			}, WithJournal(prefix, binary.BigEndian.AppendUint32(nil, uint32(i))), WithJournal("j/other/", []byte{byte(i)}))
			if err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
	}
	// read returns the journal's entries in key order, checking the
	// sequences.
	read := func(s *Store) (entries int, got []uint32) {
		m, err := s.ScanMeta(prefix)
		if err != nil {
			t.Fatal(err)
		}
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			if _, ok := JournalSeq(prefix, k); !ok {
				t.Fatalf("key %q is not a journal entry of %q", k, prefix)
			}
			v := m[k]
			for len(v) >= 4 {
				got, v = append(got, binary.BigEndian.Uint32(v)), v[4:]
			}
		}
		return len(keys), got
	}
	write(0, 3000)
	s.Close()
	s = openStore(t, dir, Options{})
	st, _ = s.Stream("tele")
	write(3000, 1000)
	entries, got := read(s)
	t.Logf("4000 appends in %d journal entries, %d commits", entries, s.Stats().Commits)
	if len(got) != 4000 || entries >= 100 {
		t.Fatalf("%d journal records in %d entries", len(got), entries)
	}
	for i, v := range got {
		if v != uint32(i) {
			t.Fatalf("journal record %d is %d: not in append order across reopens", i, v)
		}
	}
	if m, _ := s.ScanMeta("j/other/"); len(m) == 0 {
		t.Fatal("the second journal is empty")
	}
}

// TestBatchEntriesBounded: a commit's records of one segment beyond
// maxBatchEntry go to more entries, each holding consecutive offsets.
func TestBatchEntriesBounded(t *testing.T) {
	w := batchWriter{max: batchEntryMax(Options{}.withDefaults().ValueThreshold)}
	if w.max != maxBatchEntry {
		t.Fatalf("default bound %d", w.max)
	}
	rec := make([]byte, 1000)
	rec[0] = recordVersion
	const n = 1000 // ~1 MB
	for off := range uint64(n) {
		w.add("s", 1, 10+off, rec)
	}
	next := uint64(10)
	entries := 0
	if err := w.each(func(k, v []byte) error {
		entries++
		if len(v) > maxBatchEntry {
			t.Fatalf("entry of %d bytes", len(v))
		}
		_, err := entryRecords(offsetOf(k), v, 0, 1<<63, func(off uint64, _ []byte) bool {
			if off != next {
				t.Fatalf("offset %d, want %d", off, next)
			}
			next++
			return true
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if next != 10+n || entries < 4 {
		t.Fatalf("%d entries up to offset %d", entries, next)
	}
}

// TestDeleteMetaKeys deletes many keys in few transactions, absent ones
// included, and leaves the others.
func TestDeleteMetaKeys(t *testing.T) {
	// A small transaction limit, so that the deletes take several; no
	// fsync per PutMeta.
	s := openStore(t, t.TempDir(), Options{MemTableSize: 4 << 20, Durability: DurabilityPeriodic})
	var del []string
	for i := range 20000 {
		k := fmt.Sprintf("k/%05d", i)
		if err := s.PutMeta(k, make([]byte, 100)); err != nil && i == 0 {
			t.Fatal(err)
		}
		if i%4 != 0 {
			del = append(del, k)
		}
	}
	del = append(del, "k/absent")
	n, err := s.DeleteMetaKeys(del)
	if err != nil || n != len(del) {
		t.Fatalf("deleted %d of %d: %v", n, len(del), err)
	}
	m, err := s.ScanMeta("k/")
	if err != nil {
		t.Fatal(err)
	}
	for k := range m {
		var i int
		fmt.Sscanf(k, "k/%05d", &i)
		if i%4 != 0 {
			t.Fatalf("%s left", k)
		}
	}
	if len(m) != 5000 {
		t.Fatalf("%d keys left, want 5000", len(m))
	}
}

// TestReaderCutsInsideBatches: readers between cuts that fall inside
// record batches return exactly the offsets between them.
func TestReaderCutsInsideBatches(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	st := mustStream(t, s, "tele", 1)
	for range 3 {
		appendBatched(t, st, 300, 3)
	}
	if len(dataEntries(t, s, "tele", 0)) >= 300 {
		t.Fatal("no record batches written")
	}
	at := func(off uint64) StreamCut { return StreamCut{Stream: "tele", Positions: map[SegmentID]uint64{0: off}} }
	for _, fromTo := range [][2]uint64{{0, 900}, {1, 2}, {7, 299}, {150, 451}, {299, 300}, {450, 450}, {898, 900}} {
		to := at(fromTo[1])
		r, err := st.NewReader(at(fromTo[0]), &to)
		if err != nil {
			t.Fatal(err)
		}
		next := fromTo[0]
		for {
			rec, err := r.TryNext()
			if errors.Is(err, ErrEndOfCut) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.Offset != next || binary.BigEndian.Uint64(rec.Payload) != next {
				t.Fatalf("[%d, %d): read offset %d, want %d", fromTo[0], fromTo[1], rec.Offset, next)
			}
			next++
		}
		if next != fromTo[1] {
			t.Fatalf("[%d, %d): read up to %d", fromTo[0], fromTo[1], next)
		}
	}
}
