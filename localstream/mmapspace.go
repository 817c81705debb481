package localstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2/z"
	"golang.org/x/sys/unix"
)

// Badger writes its tables (NNNNNN.sst: a memtable's flush, a
// compaction), its value log (NNNNNN.vlog), its memtable logs (NNNNN.mem)
// and its discard statistics (DISCARD) through mmap of a file it has just
// extended by truncation: a sparse file, whose pages are only allocated
// when first written. On a filesystem with no free block — a tmpfs that
// another process filled, which keeps no blocks for root as ext4 does — a
// write to a page that cannot be allocated is a SIGBUS, a crash of the
// whole process, not an error; however short the moment between a check
// for room and the write, another process can take the last blocks in it.
//
// So every such file gets its blocks before it is mapped: Badger opens
// and extends them through ristretto's z.OpenMmapFile and
// MmapFile.Truncate, which a patched copy (third_party/ristretto, see its
// README) makes call z.Allocate with the new range, and allocateMapped
// below fallocates it. No blocks is then an error where Badger can take
// one: a flush or a compaction fails and Badger retries it (a flush every
// second, a compaction at its next turn), an Open fails with ErrDiskFull
// (Open maps it). Nothing is written through a mapping whose blocks the
// filesystem has not given.
//
// A memtable log is 2 × MemTableSize and mostly unwritten: it gets only
// its first mappedLogHead bytes here (its header, and what is written
// before the committer's first allocation); walSpace allocates the rest
// ahead of every commit. The value log's files are 2 × badgerVlogFileSize,
// all allocated: Badger's value-log file size is set to its least (1 MiB)
// so that this costs 2 MiB, not 2 × Options.ValueLogFileSize (the value
// log only holds Badger entries of ValueThreshold and more, which the
// store's record batches are kept below; Badger grows a file, through
// Truncate, for an entry larger than what is left).

// badgerVlogFileSize is the size Badger is given for its value-log files
// (its least): each is created at twice that, all allocated.
const badgerVlogFileSize = 1 << 20

// mappedLogHead is what a new memtable log gets allocated when Badger
// creates it: the committer allocates the rest ahead of its commits.
const mappedLogHead = walAhead

// allocRefused counts the files (or extensions) of Badger's that could
// not have their blocks: each is an error Badger got instead of a SIGBUS.
var allocRefused atomic.Int64

func init() { z.Allocate = allocateMapped }

// allocateMapped gives the blocks of [off, off+size) to fd, a file Badger
// is about to map and write (z.Allocate). A filesystem without fallocate
// is left as it was.
func allocateMapped(fd *os.File, off, size int64) error {
	name := filepath.Base(fd.Name())
	if off == 0 && strings.HasSuffix(name, ".mem") {
		size = min(size, mappedLogHead)
	}
	err := unix.Fallocate(int(fd.Fd()), 0, off, size)
	switch {
	case err == nil, err == unix.EOPNOTSUPP:
		return nil
	case err == unix.ENOSPC:
		allocRefused.Add(1)
		if off == 0 && (strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".vlog")) {
			// Badger created it (O_EXCL) and will not: a value-log file
			// left behind would take the number of the next one.
			os.Remove(fd.Name())
		}
		return fmt.Errorf("%w: no blocks for %s (%d bytes at %d): %w", ErrDiskFull, name, size, off, err)
	}
	return fmt.Errorf("localstream: allocating %s: %w", name, err)
}
