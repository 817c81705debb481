package localstream

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBadgerLogBounded: Badger's retry of a failing memtable flush (an
// error a second, a new file name each time) is logged once per
// badgerLogEvery with the count held back, not once a second.
func TestBadgerLogBounded(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	b := newBadgerLogger(slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	const f = "error flushing memtable to disk: %v, retrying"
	for i := range 60 {
		b.Errorf(f, "open 0000"+string(rune('0'+i%10))+".sst: read-only file system")
		b.Warningf("another message %d", i)
		now = now.Add(time.Second)
	}
	out := buf.String()
	if n := strings.Count(out, "error flushing memtable"); n != 2 {
		t.Fatalf("60 retries in 60 s logged %d times, want 2 (at 0 s and 30 s):\n%s", n, out)
	}
	if !strings.Contains(out, "repeated=29") {
		t.Fatalf("the second line does not count the 29 held back:\n%s", out)
	}
	if n := strings.Count(out, "another message"); n != 2 {
		t.Fatalf("a second format logged %d times, want 2", n)
	}
}
