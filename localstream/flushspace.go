package localstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Badger writes a memtable to a new table (NNNNNN.sst) when the memtable
// is full, when the store closes and, for the logs a previous run left,
// when it opens. The table's blocks are allocated before Badger maps it
// (mmapspace.go), so no room is an error Badger retries, not a SIGBUS; but
// a flush retried every second while commits pile into the next memtables
// is not a way to run. So the store looks before it lets Badger flush:
//
//   - Open refuses (ErrDiskFull) when the memtable logs it would replay
//     and flush hold more than the filesystem has free;
//   - Close skips Badger's flush of the memtable when there is not room
//     for it: the log is synced and replayed at the next Open, which waits
//     for the room (closeWithoutFlush);
//   - a commit in the second half of a memtable, which may fill it and
//     start its flush, is refused (ErrDiskFull, nothing written) while the
//     filesystem has less free than that memtable's table (walSpace).
//
// A process that takes the blocks between the check and the flush, or a
// compaction (tables written from tables) on a full filesystem, gets the
// error (mmapspace.go); the free-space floor (Options.MinFreeBytes) is
// what leaves room for compactions.

// flushNeed is what flushing the memtable logs in dir to tables may take:
// the blocks the logs hold (the walSpace allocates a little ahead of the
// writes, so this is a bound from above), with an eighth more for each
// table's index and filter.
func flushNeed(dir string) (int64, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".mem") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, f.Name()), &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n + n/8, nil
}

// roomToFlush checks that the filesystem of dir has room for flushing its
// memtable logs: ErrDiskFull when it has not. A filesystem whose free
// space cannot be read is taken to have room.
func roomToFlush(dir string) error {
	need, err := flushNeed(dir)
	if err != nil || need == 0 {
		return nil
	}
	free, err := statfsFree(dir)
	if err != nil || free >= need {
		return nil
	}
	return fmt.Errorf("%w: %d bytes free, flushing the memtable's log to a table takes up to %d", ErrDiskFull, free, need)
}
