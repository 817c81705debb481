package mavlink

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/tlog"
)

// TestTlogRoundTrip: entries written by AppendTlogEntry read back equal;
// a cut or damaged file is an error, not a crash.
func TestTlogRoundTrip(t *testing.T) {
	w := newWriter(t, false, 1, 1, nil)
	var file []byte
	var want []TlogEntry
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for i := range 50 {
		f := w.frame(t, sampleMessages(i)[i%5])
		at = at.Add(time.Duration(i) * time.Millisecond)
		file = AppendTlogEntry(file, at, f)
		want = append(want, TlogEntry{at, f})
	}
	r := NewTlogReader(bytes.NewReader(file), nil)
	for i, e := range want {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !got.Time.Equal(e.Time) || !bytes.Equal(got.Frame, e.Frame) {
			t.Fatalf("entry %d: %v % x, want %v % x", i, got.Time, got.Frame, e.Time, e.Frame)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last entry: %v", err)
	}
	if _, err := readTlog(file[:len(file)-3]); !errors.Is(err, ErrTlog) {
		t.Fatalf("cut file: %v", err)
	}
	bad := append([]byte(nil), file...)
	bad[20] ^= 0xFF
	if _, err := readTlog(bad); !errors.Is(err, ErrTlog) {
		t.Fatalf("damaged file: %v", err)
	}
}

func readTlog(b []byte) ([]TlogEntry, error) {
	r := NewTlogReader(bytes.NewReader(b), nil)
	var out []TlogEntry
	for {
		e, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		e.Frame = append([]byte(nil), e.Frame...)
		out = append(out, e)
	}
}

func FuzzTlogReader(f *testing.F) {
	w := newWriter(f, false, 1, 1, nil)
	var file []byte
	for i := range 5 {
		file = AppendTlogEntry(file, time.Unix(1_800_000_000, int64(i)), w.frame(f, sampleMessages(i)[i]))
	}
	f.Add(file)
	f.Add(file[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := readTlog(b)
		if err != nil && !errors.Is(err, ErrTlog) {
			t.Fatalf("error %v does not wrap ErrTlog", err)
		}
		var again []byte
		for _, e := range entries {
			again = AppendTlogEntry(again, e.Time, e.Frame)
		}
		if !bytes.HasPrefix(b, again) {
			t.Fatal("entries read do not write back to the file's start")
		}
	})
}

// TestFlightTlog: the tlog gomavlib wrote (testdata/mavlink) reads back
// whole, each entry as gomavlib's own tlog reader reads it.
func TestFlightTlog(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "mavlink", "flight.tlog"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readTlog(b)
	if err != nil {
		t.Fatal(err)
	}
	ref := &tlog.Reader{ByteReader: bytes.NewReader(b)}
	if err := ref.Initialize(); err != nil {
		t.Fatal(err)
	}
	systems := map[uint8]int{}
	for i, e := range entries {
		re, err := ref.Read()
		if err != nil {
			t.Fatalf("gomavlib entry %d: %v", i, err)
		}
		var buf bytes.Buffer
		fw := &frame.Writer{ByteWriter: &buf}
		fw.Initialize()
		if err := fw.Write(re.Frame); err != nil {
			t.Fatal(err)
		}
		if !re.Time.Equal(e.Time) || !bytes.Equal(buf.Bytes(), e.Frame) {
			t.Fatalf("entry %d: %v % x; gomavlib reads %v % x", i, e.Time, e.Frame, re.Time, buf.Bytes())
		}
		systems[re.Frame.GetSystemID()]++
	}
	if _, err := ref.Read(); err == nil {
		t.Fatal("gomavlib reads more entries")
	}
	if len(entries) != 1480 || systems[1] != 740 || systems[2] != 740 {
		t.Fatalf("%d entries, by system %v", len(entries), systems)
	}
}
