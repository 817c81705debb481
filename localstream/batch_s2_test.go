package localstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/s2"
)

// telemetryRecords returns n records of one drone's telemetry, as the
// listener stores them: the same routing key, writer, content type and
// topic header, a random payload of size bytes.
func telemetryRecords(rng *rand.Rand, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		ev := Event{RoutingKey: "drone-17", Writer: "gs1/mqtt/drone-17", ContentType: "application/octet-stream",
			EventTime: int64(1e18 + i*1e6), IngestTime: int64(1e18 + i*1e6 + 5e5),
			Headers: []Header{{Key: "mqtt-topic", Value: "tel/drone-17"}}, Payload: p}
		out[i] = appendRecord(nil, &ev)
	}
	return out
}

// storeBatch stores recs at offsets last-len+1 … last as the committer does
// and returns the one entry's value.
func storeBatch(t *testing.T, recs [][]byte, last uint64) []byte {
	t.Helper()
	w := batchWriter{max: maxBatchEntry}
	for i, r := range recs {
		w.add("s", 0, last+1-uint64(len(recs)-i), r)
	}
	var vals [][]byte
	if err := w.each(func(_, v []byte) error { vals = append(vals, v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(vals) != 1 {
		t.Fatalf("%d entries, want 1", len(vals))
	}
	return vals[0]
}

// TestCompressedBatches: a batch of one drone's telemetry is stored
// compressed (version 4) and reads back record for record in every
// window; a batch that S2 cannot shrink by an eighth stays version 3; a
// corrupt compressed batch is an error, never a panic or a large
// allocation.
func TestCompressedBatches(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const last = 1000
	recs := telemetryRecords(rng, 140, 200)
	raw := 0
	for _, r := range recs {
		raw += uvarintLen(len(r)) + len(r)
	}
	v := storeBatch(t, recs, last)
	if v[0] != recordVersionBatchS2 {
		t.Fatalf("telemetry batch stored as version %d, want %d", v[0], recordVersionBatchS2)
	}
	t.Logf("140 records of 200-byte random payloads: %d bytes, %d compressed (%.2f)", raw, len(v), float64(len(v))/float64(raw))
	if len(v) > raw*7/8 {
		t.Fatalf("compressed batch %d bytes of %d", len(v), raw)
	}
	first := uint64(last + 1 - len(recs))
	for _, w := range [][2]uint64{{0, 1 << 63}, {first, first + 1}, {first + 70, first + 71}, {first + 3, last}, {last, last + 1}, {last + 1, last + 5}} {
		var got []uint64
		_, err := entryRecords(last, v, w[0], w[1], func(off uint64, rec []byte) bool {
			if !bytes.Equal(rec, recs[off-first]) {
				t.Fatalf("window %v: offset %d reads back different bytes", w, off)
			}
			got = append(got, off)
			return true
		})
		if err != nil {
			t.Fatalf("window %v: %v", w, err)
		}
		if want := max(0, int(min(w[1], last+1))-int(max(w[0], first))); len(got) != want {
			t.Fatalf("window %v: %d records, want %d", w, len(got), want)
		}
	}

	// Large random payloads: the repeated fields are too small a share.
	big := telemetryRecords(rng, 3, 2000)
	if v := storeBatch(t, big, last); v[0] != recordVersionBatch {
		t.Fatalf("incompressible batch stored as version %d, want %d", v[0], recordVersionBatch)
	}

	all := func(b []byte) error {
		_, err := entryRecords(last, b, 0, 1<<63, func(uint64, []byte) bool { return true })
		return err
	}
	for k := 1; k < len(v); k++ {
		if err := all(v[:k]); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("compressed batch truncated to %d bytes: %v", k, err)
		}
	}
	wrap := func(b []byte) []byte { return append([]byte{recordVersionBatchS2}, s2.Encode(nil, b)...) }
	v3 := make([]byte, 0, raw+8)
	v3 = append(v3, recordVersionBatch)
	v3 = binary.AppendUvarint(v3, uint64(len(recs)))
	for _, r := range recs {
		v3 = appendBytes(v3, r)
	}
	if err := all(wrap(v3)); err != nil {
		t.Fatalf("a version-3 batch in S2: %v", err)
	}
	huge := binary.AppendUvarint([]byte{recordVersionBatchS2}, 1<<40)
	for name, b := range map[string][]byte{
		"a lone record":            wrap(recs[0]),
		"a compressed batch":       wrap(v),
		"a count past the records": wrap(append(binary.AppendUvarint([]byte{recordVersionBatch}, 141), v3[1+uvarintLen(len(recs)):]...)),
		"a decoded length of 1 TB": append(huge, bytes.Repeat([]byte{0}, 64)...),
		"one over the bound":       append(binary.AppendUvarint([]byte{recordVersionBatchS2}, maxBatchDecoded+1), 0),
		"an empty block":           {recordVersionBatchS2},
		"garbage":                  append([]byte{recordVersionBatchS2, 9}, bytes.Repeat([]byte{0xff}, 9)...),
	} {
		if err := all(b); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestStoreCompressesTelemetryBatches: through the store, a commit of one
// drone's telemetry is one compressed entry, and it reads back whole after
// a reopen.
func TestStoreCompressesTelemetryBatches(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.CreateStream("tel", StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	recs := telemetryRecords(rng, 300, 200)
	want := make([]Event, len(recs))
	done := make(chan error, len(recs))
	for i, r := range recs {
		ev, err := decodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = ev
		if err := st.AppendAsync(t.Context(), ev, func(_ Position, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range recs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	versions := map[byte]int{}
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: segmentPrefix("tel", st.Topology().Segments[0].ID)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := it.Item().Value(func(v []byte) error { versions[v[0]]++; return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if versions[recordVersionBatchS2] == 0 {
		t.Fatalf("no compressed batch among the entries: versions %v", versions)
	}
	t.Logf("entries by version: %v", versions)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, _ = s.Stream("tel")
	got, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d events read back, want %d", len(got), len(want))
	}
	for i := range got {
		if fmt.Sprint(got[i].Event) != fmt.Sprint(want[i]) {
			t.Fatalf("event %d: %+v, want %+v", i, got[i].Event, want[i])
		}
	}
}
