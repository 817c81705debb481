package localstream

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Freed means freed. Deleting a key in Badger (Truncate, Shed) writes a
// tombstone and frees nothing: an event's payload stays in its value-log
// file until value-log GC rewrites that file's live entries elsewhere and
// deletes it, and GC only picks a file by its discard statistics, which
// Badger updates when a compaction drops the old versions that a tombstone
// hides. While the disk is full nothing is written, so the memtable holding
// the tombstones never fills and flushes on its own. Reclaim therefore
// drives the whole chain after deletions:
//
//  1. flush the memtable into level 0 (Badger's DropPrefix of a sentinel
//     key: the only public flush; it refuses concurrent writes, so every
//     write of the store goes through the write gate, which Reclaim holds
//     exclusively for the flush);
//  2. Flatten the LSM tree into one level, so that every tombstone meets
//     the value it hides and the value's bytes count as discarded;
//  3. run value-log GC until no file has discardRatio of garbage: a file
//     that is all garbage is deleted without rewriting anything.
//
// What stays on disk after Reclaim: the value-log file being written
// (at most Options.ValueLogFileSize), and files less than discardRatio
// garbage (with oldest-first deletion, one partly deleted file). So the
// space of deleted events, less 2 × ValueLogFileSize, is back on the
// filesystem when Reclaim returns; BENCHMARKS.md ("Disk pressure") has the
// time it takes and the bytes it writes.

// discardRatio is the share of garbage from which value-log GC rewrites a
// file: 0.5 rewrites at most as many bytes as it frees.
const discardRatio = 0.5

// sentinelKey is written and dropped to flush the memtable (see Reclaim).
var sentinelKey = []byte{prefixReclaim}

// ReclaimResult says what Reclaim did.
type ReclaimResult struct {
	// Files is the number of value-log files rewritten and deleted.
	Files int `json:"files"`
	// Before and After are the bytes the store's files occupied on disk.
	Before, After int64
	// Written is the bytes Reclaim wrote: files it created plus the growth
	// of files it kept (compacted tables, entries GC moved, the manifest).
	Written int64
	// Took is how long Reclaim ran.
	Took time.Duration
}

// Freed is the number of bytes given back to the filesystem (negative if
// the store grew meanwhile).
func (r ReclaimResult) Freed() int64 { return r.Before - r.After }

// Reclaim gives the space of deleted events (Truncate, Shed) back to the
// filesystem: flush, flatten, value-log GC (see the comment above). It is
// safe for concurrent use (calls are serialised) and runs concurrently
// with appends, which wait only while the memtable is flushed. It stops
// early, with ctx's error, when ctx ends.
func (s *Store) Reclaim(ctx context.Context) (res ReclaimResult, err error) {
	s.reclaimMu.Lock()
	defer s.reclaimMu.Unlock()
	start := s.opts.Now()
	before := s.diskFiles()
	for _, n := range before {
		res.Before += n
	}
	defer func() {
		for name, n := range s.diskFiles() {
			res.After += n
			res.Written += max(0, n-before[name]) // all of a new file
		}
		res.Took = s.opts.Now().Sub(start)
	}()
	if err := s.Err(); err != nil {
		return res, err
	}
	if err := s.flushMemtable(); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if err := s.db.Flatten(2); err != nil {
		return res, fmt.Errorf("localstream: reclaim: flatten: %w", err)
	}
	for ctx.Err() == nil {
		err := s.db.RunValueLogGC(discardRatio)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("localstream: reclaim: value-log GC: %w", err)
		}
		res.Files++
	}
	s.refreshFree()
	return res, ctx.Err()
}

// flushMemtable writes the memtable (with its tombstones) to level 0.
func (s *Store) flushMemtable() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	// DropPrefix opens the next memtable itself: its log first, as a
	// commit would (walspace.go). (The gate keeps the committer out.)
	if err := s.wal.reserve(0); err != nil {
		return fmt.Errorf("localstream: reclaim: %w", err)
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(sentinelKey, nil) }); err != nil {
		return fmt.Errorf("localstream: reclaim: %w", err)
	}
	if err := s.db.DropPrefix(sentinelKey); err != nil {
		return fmt.Errorf("localstream: reclaim: flush: %w", err)
	}
	return nil
}

// update is db.Update under the write gate (see Reclaim).
func (s *Store) update(fn func(txn *badger.Txn) error) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.db.Update(fn)
}

// DiskUsage returns the bytes the store's files occupy on disk (allocated
// blocks, as du counts them).
func (s *Store) DiskUsage() int64 {
	var used int64
	for _, n := range s.diskFiles() {
		used += n
	}
	return used
}

// diskFiles returns the bytes allocated to each file of the store.
func (s *Store) diskFiles() map[string]int64 {
	out := map[string]int64{}
	filepath.WalkDir(s.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil // files vanish under Badger: not an error
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				out[path] = st.Blocks * 512
			}
		}
		return nil
	})
	return out
}

// floorLogEvery bounds the rate of the below-floor error while it lasts.
const floorLogEvery = 30 * time.Second

// BelowFloor reports whether free space was below Options.MinFreeBytes at
// the last measurement (every 250 ms): appends are then refused with
// ErrDiskFull. It is safe for concurrent use.
func (s *Store) BelowFloor() bool {
	return s.opts.MinFreeBytes >= 0 && s.free.Load() < s.opts.MinFreeBytes
}

// noteFloor logs when free space falls below the floor (an error, repeated
// at most every floorLogEvery while it lasts) and when it is back.
func (s *Store) noteFloor() {
	last := s.floorLogged.Load()
	switch {
	case s.BelowFloor() && (last == 0 || s.opts.Now().Sub(time.Unix(0, last)) >= floorLogEvery):
		s.floorLogged.Store(s.opts.Now().UnixNano())
		s.log.Error("localstream: free space below min_free_bytes: appends refused until space is freed",
			"free_bytes", s.free.Load(), "min_free_bytes", s.opts.MinFreeBytes, "refused", s.diskFull.Load())
	case !s.BelowFloor() && last != 0:
		s.floorLogged.Store(0)
		s.log.Info("localstream: free space back above min_free_bytes: appends accepted",
			"free_bytes", s.free.Load(), "min_free_bytes", s.opts.MinFreeBytes)
	}
}
