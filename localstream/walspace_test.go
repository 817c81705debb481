package localstream

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/edge-agent/edge-agent/internal/testkit"

	"golang.org/x/sys/unix"
)

// BenchmarkCommitChecks is what the committer adds to every commit for a
// failing or full disk: the directory's stat (watchDir) and the memtable
// log's allocation (walSpace.ensure, a stat, a fallocate per MiB), for
// commits of 300 bytes.
//
//	go test -run '^$' -bench BenchmarkCommitChecks ./localstream/
func BenchmarkCommitChecks(b *testing.B) {
	s, err := Open(b.TempDir(), Options{MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if err := s.wal.ensure(300); err != nil {
			b.Fatal(err)
		}
		s.watchDir()
	}
}

// TestWALSpaceRefusesAFlushWithoutRoom: in the second half of a memtable
// a commit may fill it and start its flush to a table, which Badger
// writes through mmap: on a real tmpfs with room for the log's blocks but
// not for the table, the commit is refused with ErrDiskFull (nothing
// written) instead of letting the flush fault.
//
// Failed before the check: the commit was allowed with 4 MiB free for a
// table of up to 5 MiB.
func TestWALSpaceRefusesAFlushWithoutRoom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fs")
	testkit.MountTmpfs(t, dir, 32<<20)
	const memtable = 8 << 20
	if err := os.WriteFile(filepath.Join(dir, "00001.mem"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := newWALSpace(dir, memtable, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ensure(3 << 20); err != nil { // the first half: no check
		t.Fatal(err)
	}
	// Another process leaves 4 MiB: room for the log's next blocks, not
	// for a table of the memtable.
	free, err := statfsFree(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free-4<<20); err != nil {
		t.Fatal(err)
	}
	err = w.ensure(3 << 19) // 4.5 MiB written: past half the memtable
	if !errors.Is(err, ErrDiskFull) {
		free, _ := statfsFree(dir)
		t.Fatalf("a commit past half the memtable with %d bytes free: %v, want ErrDiskFull", free, err)
	}
	t.Logf("refused: %v", err)
	if w.written != 3<<20 {
		t.Fatalf("refused commit counted as written: %d", w.written)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		t.Fatal(err)
	}
	if err := w.ensure(3 << 19); err != nil {
		t.Fatalf("with room again: %v", err)
	}
}
