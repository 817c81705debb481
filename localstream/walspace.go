package localstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The memtable's log is written through mmap. Badger creates each
// memtable's log file (NNNNN.mem, 2 × MemTableSize) by truncating it to
// its size, a sparse file, and copies every commit into the mapping: the
// page under a write is only allocated when it is first touched. On a
// filesystem with no free block left — a tmpfs that another process
// filled, where no blocks are reserved for root as on ext4 — the kernel
// cannot allocate the page, and a write to it is a SIGBUS (a crash of the
// whole process, not an error). So the committer allocates the log's
// blocks before Badger writes them (walSpace.ensure, before every
// commit): the current log from the start to walAhead past the estimated
// end of the commit, and the next memtable's log ahead of time — created
// empty with its first blocks allocated beyond its end (fallocate
// KEEP_SIZE), which Badger then opens, truncates to its size and writes
// into. When the blocks cannot be had the commit is refused with
// ErrDiskFull, as below the free-space floor: nothing was written, and
// it can be retried once space is back.
//
// The log's first MiB is allocated when Badger creates it, and every other
// file Badger maps for writing is allocated whole (mmapspace.go); see
// flushspace.go for how the store leaves room for its tables.

// walAhead is how far past the estimated end of the next commit the
// memtable log's blocks are kept allocated: room for the writes that do
// not go through the committer (metadata, cuts, marks) between two
// commits.
const walAhead = 1 << 20

// walChunk is how much more than needed each allocation of the log takes.
const walChunk = 1 << 20

// walSpace keeps the blocks of the memtable's log allocated ahead of
// Badger's writes. Committer goroutine only, but for prepare and init.
type walSpace struct {
	dir string
	// size is a log file's size (2 × MemTableSize); first what is
	// allocated of the next log ahead of time (walAhead + the largest
	// commit: the commit that rotates the memtable lands there).
	size, first int64
	// fid is the current log's number; written the estimate of the
	// bytes written to it; alloc the bytes allocated from its start.
	fid            int
	written, alloc int64
	// next is true once the next log (fid+1) is created with its
	// first bytes allocated.
	next bool
}

// prepareWAL removes the next-log files a previous run left (empty: no
// memtable was ever in them) before Badger opens dir: Badger takes every
// .mem file for a memtable to replay, and an empty one for an error. It
// leaves them when another Open holds the store (Badger's flock of the
// directory: its Open then fails anyway).
func prepareWAL(dir string) error {
	if lock, err := os.Open(dir); err == nil {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		lock.Close() // releases the lock
		if err != nil {
			return nil
		}
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".mem") {
			continue
		}
		if info, err := f.Info(); err == nil && info.Size() == 0 {
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// newWALSpace finds the log Badger opened last (Open creates a memtable).
func newWALSpace(dir string, memTableSize, maxBatchBytes int64) (*walSpace, error) {
	w := &walSpace{dir: dir, size: 2 * memTableSize, first: walAhead + maxBatchBytes, fid: -1}
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if n, ok := strings.CutSuffix(f.Name(), ".mem"); ok {
			if fid, err := strconv.Atoi(n); err == nil && fid > w.fid {
				w.fid = fid
			}
		}
	}
	if w.fid < 0 {
		return nil, fmt.Errorf("localstream: no memtable log in %s", dir)
	}
	w.written = w.touched(w.fid)
	return w, nil
}

func (w *walSpace) path(fid int) string { return filepath.Join(w.dir, fmt.Sprintf("%05d.mem", fid)) }

// touched is the bytes allocated to log fid (for a log this did not
// allocate ahead: the pages Badger wrote), 0 if it does not exist.
func (w *walSpace) touched(fid int) int64 {
	var st syscall.Stat_t
	if syscall.Stat(w.path(fid), &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// ensure makes room in the log for a commit of about n bytes: it follows
// Badger to its next log when the memtable rotated, allocates the
// current log past the estimated end of the commit and creates the next one.
// It fails with ErrDiskFull when the filesystem has no blocks for them.
func (w *walSpace) ensure(n int64) error { return w.grow(n, true) }

// reserve makes room in the log for about n bytes written outside a
// commit (a deletion's tombstones): they are counted in the estimate of
// the log's write offset, so the commits after them allocate past them
// too, and the log is allocated past them — and the next log for all of
// them as well, since they may fill the memtable on the way. Without the
// check for room to flush: a deletion is what gives space back.
// ErrDiskFull when the blocks cannot be had (nothing is to be written
// then).
func (w *walSpace) reserve(n int64) error { return w.grow(n, false) }

func (w *walSpace) grow(n int64, flushCheck bool) (err error) {
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(w.path(w.fid+1), &st); err != nil || st.Size == 0 {
			break
		}
		// Badger moved on to the next log (a full memtable, or a flush
		// by Reclaim): its first bytes were allocated, if by us.
		w.fid++
		w.written, w.alloc, w.next = max(w.touched(w.fid)-w.first, 0), 0, false
		if w.written == 0 {
			w.written = n // the commit that rotated it, about
		}
	}
	w.written += n
	defer func() {
		if err != nil {
			w.written -= n // nothing was written: a refused commit is retried
		}
	}()
	// In the second half of the memtable a commit may fill it and start
	// its flush to a table, written through mmap: only with room for it
	// (flushspace.go). Nothing is written when refused.
	// (written is an estimate from above, 4 KiB a commit more than the
	// records: capped at the log's size, which bounds the table.)
	if flushCheck && w.written >= w.size/4 {
		est := min(w.written, w.size)
		if free, err := statfsFree(w.dir); err == nil && free < est+est/8 {
			need := est + est/8
			return fmt.Errorf("%w: %d bytes free, the memtable's table will take up to %d", ErrDiskFull, free, need)
		}
	}
	// Past the commit, walAhead more: the little that is not written
	// through the committer. (Kept small: what is allocated past the
	// writes is given back when the log is deleted after its flush, and
	// free space that swings by more would move across the floor.)
	// One fallocate per walChunk of writes, not one per commit (a
	// journal transaction on ext4: it cost a lone writer's commits a
	// quarter more CPU).
	ahead := n // (a commit: its bytes once more)
	if !flushCheck {
		ahead = 0 // (tombstones: MiBs, counted once)
	}
	if want := min(w.written+walAhead+ahead, w.size); want > w.alloc {
		to := min(want+walChunk, w.size)
		if err := w.allocate(w.path(w.fid), 0, w.alloc, to-w.alloc); err != nil {
			return err
		}
		w.alloc = to
	}
	if !w.next {
		if err := w.allocate(w.path(w.fid+1), unix.FALLOC_FL_KEEP_SIZE, 0, min(w.first, w.size)); err != nil {
			return err
		}
		w.next = true
	}
	// Tombstones may fill the memtable and go on into the next log: it
	// gets room for all of them too.
	if !flushCheck && n > walAhead {
		if err := w.allocate(w.path(w.fid+1), unix.FALLOC_FL_KEEP_SIZE, 0, min(w.first+n, w.size)); err != nil {
			return err
		}
	}
	return nil
}

// allocate allocates length bytes at off in the file at path (created
// empty if it does not exist).
func (w *walSpace) allocate(path string, mode uint32, off, length int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("localstream: memtable log: %w", err)
	}
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), mode, off, length)
	switch {
	case err == unix.ENOSPC:
		return fmt.Errorf("%w: no blocks for the memtable's log (%d bytes at %d of %s)", ErrDiskFull, length, off, filepath.Base(path))
	case err == unix.EOPNOTSUPP:
		return nil // a filesystem without fallocate: nothing to reserve
	case err != nil:
		return fmt.Errorf("localstream: memtable log %s: %w", filepath.Base(path), err)
	}
	return nil
}

// ReleaseDir makes a store's directory that no process holds openable by
// plain Badger (badger.Open, Badger's own tools): it removes the empty
// next-log file a store that did not close (a crash, SIGKILL) leaves
// behind, which Badger would take for a memtable and refuse. Open does the
// same itself.
func ReleaseDir(dir string) error { return prepareWAL(dir) }
