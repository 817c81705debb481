package localstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Store is a set of streams in one Badger database. It is safe for
// concurrent use. All appends of all streams go through one committer
// goroutine that assigns offsets and groups appends into Badger commits;
// a completer goroutine acknowledges them in order once fsync'd.
type Store struct {
	db   *badger.DB
	opts Options
	log  *slog.Logger
	// id is the store identity (see ID); set by Open.
	id string
	// openID is random per Open (see OpenID).
	openID string

	// mu guards streams.
	mu      sync.Mutex
	streams map[string]*Stream
	// shedMu runs sheds and FinishSheds one at a time.
	shedMu sync.Mutex

	// closeMu is held for reading while a request is enqueued and for
	// writing by Close, so Close never closes queue under a sender.
	closeMu sync.RWMutex
	closed  bool

	queue    chan *appendReq     // appends, FIFO: the order of offsets
	ctrl     chan ctrlReq        // scales, truncations: run by the committer
	inflight chan *inflightBatch // commits written, waiting for their fsync
	wg       sync.WaitGroup      // committer, completer, syncer
	stopSync chan struct{}

	// errMu guards sticky: after a failed write every later write fails with it.
	errMu  sync.Mutex
	sticky error
	// wal keeps the memtable log's blocks allocated ahead of Badger's
	// writes (see walspace.go). Committer goroutine only.
	wal *walSpace
	// failed is closed when sticky is set (Failed).
	failed chan struct{}
	// dirIno is the data directory's inode at Open: a directory removed
	// (or replaced) under the store is a failure (see watchDir).
	dirIno uint64

	// free is the last measured free space; pending the bytes accepted since.
	free, pending atomic.Int64
	// diskFull counts appends refused with ErrDiskFull.
	diskFull atomic.Uint64
	// acked counts the appends the completer has finished (acknowledged
	// or failed); completed wakes a batch held open when it advances.
	acked     atomic.Uint64
	completed chan struct{}
	// taken counts the appends written by the committer, expect is how
	// many the next batch may hold open for, holdTimer is its window.
	// Committer goroutine only.
	taken     uint64
	expect    int
	holdTimer *time.Timer

	// commits counts the Badger commits of appends: each is one WAL sync
	// in DurabilityAlways (Badger syncs the WAL per transaction).
	commits atomic.Uint64
	// journalSeq is the sequence of the next commit's journal entries
	// (WithJournal). Committer goroutine only.
	journalSeq uint64
	// floorLogged is when the free-space floor was last reported (Unix ns;
	// 0 while above it).
	floorLogged atomic.Int64

	// payloads holds the large payloads (see payload.go).
	payloads *payloadStore

	// gate is held for reading by every Badger write and for writing by
	// Reclaim's memtable flush, which Badger refuses concurrent writes for.
	gate sync.RWMutex
	// reclaimMu serialises Reclaim.
	reclaimMu sync.Mutex

	closeOnce sync.Once
	closeErr  error
}

// Open opens (or creates) the store in dir and recovers every stream: all
// acknowledged events are found, none partially.
func Open(dir string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	bo := badger.DefaultOptions(dir).
		WithSyncWrites(opts.Durability == DurabilityAlways).
		WithValueThreshold(opts.ValueThreshold).
		WithMemTableSize(opts.MemTableSize).
		// Badger's value-log files are allocated whole (mmapspace.go):
		// its least size; payload files take Options.ValueLogFileSize.
		WithValueLogFileSize(badgerVlogFileSize).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false).
		WithNumCompactors(opts.Compactors).
		// WithLoggingLevel installs Badger's own logger: set it first.
		WithLoggingLevel(badger.WARNING).
		WithLogger(newBadgerLogger(opts.Logger, opts.Now))
	if err := prepareWAL(dir); err != nil {
		return nil, fmt.Errorf("localstream: open %s: %w", dir, err)
	}
	// Badger flushes the logs it finds to tables as it opens (flushspace.go).
	if err := roomToFlush(dir); err != nil {
		return nil, fmt.Errorf("localstream: open %s: %w (the logs of the last run wait for room)", dir, err)
	}
	db, err := badger.Open(bo)
	if err != nil {
		// Badger flattens the errors it wraps: a file it could not have
		// the blocks of (mmapspace.go), or a write with no space, is told
		// by its text.
		if msg := err.Error(); !errors.Is(err, ErrDiskFull) &&
			(strings.Contains(msg, ErrDiskFull.Error()) || strings.Contains(msg, syscall.ENOSPC.Error())) {
			return nil, fmt.Errorf("localstream: open %s: %w: %v", dir, ErrDiskFull, err)
		}
		return nil, fmt.Errorf("localstream: open %s: %w", dir, err)
	}
	// Before anything is written: the memtable's log allocated ahead.
	wal, err := newWALSpace(dir, opts.MemTableSize, int64(opts.MaxBatchBytes))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("localstream: open %s: %w", dir, err)
	}
	if err := wal.ensure(0); err != nil && !errors.Is(err, ErrDiskFull) {
		db.Close()
		return nil, fmt.Errorf("localstream: open %s: %w", dir, err)
	}
	s := &Store{
		db:       db,
		opts:     opts,
		log:      opts.Logger,
		streams:  map[string]*Stream{},
		queue:    make(chan *appendReq, opts.QueueDepth),
		ctrl:     make(chan ctrlReq),
		inflight: make(chan *inflightBatch, opts.MaxInflight),
		stopSync: make(chan struct{}),

		completed: make(chan struct{}, 1),
		failed:    make(chan struct{}),
		wal:       wal,
		holdTimer: time.NewTimer(time.Hour),
	}
	s.holdTimer.Stop()
	// Each commit with journal entries takes the next sequence, and Badger
	// gives every commit a version above the last: a sequence never
	// exceeds its commit's version, so starting above the highest version
	// keeps the journals' keys increasing across reopens.
	s.journalSeq = db.MaxVersion() + 1
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	if s.payloads, err = openPayloads(dir, opts.ValueLogFileSize, db); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.ensureID(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.refreshFree(); err != nil {
		db.Close()
		return nil, err
	}
	if s.dirIno, err = inode(dir); err != nil {
		db.Close()
		return nil, fmt.Errorf("localstream: open %s: %w", dir, err)
	}
	s.wg.Add(3)
	go s.freeLoop()
	go s.commitLoop()
	go s.completeLoop()
	if opts.Durability == DurabilityPeriodic {
		s.wg.Add(1)
		go s.syncLoop()
	}
	if err := s.recoverSheds(); err != nil {
		s.Close()
		return nil, fmt.Errorf("localstream: finishing an interrupted shed: %w", err)
	}
	return s, nil
}

// load reads every stream's metadata and recovers segment lengths from the data keys.
func (s *Store) load() error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixStream}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var m streamMeta
			err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &m) })
			if err != nil {
				return fmt.Errorf("%w: stream metadata %q: %w", ErrCorruptRecord, it.Item().Key(), err)
			}
			st := newStream(s, m)
			for _, seg := range st.segs {
				if seg.Sealed {
					seg.Length = seg.final
				} else {
					seg.Length = max(seg.Start, lastOffset(txn, st.name, seg.ID))
				}
				seg.assigned = seg.Length
				seg.Bytes = sampledBytes(txn, st.name, seg.ID, seg.Start, seg.Length)
			}
			st.recovered = st.topologyLocked().TailCut()
			s.streams[m.Name] = st
		}
		return nil
	})
}

// bytesSample is how many of a segment's last events sampledBytes reads.
const bytesSample = 64

// sampledBytes estimates a segment's payload bytes at open (Segment.Bytes:
// what earlier runs appended is not kept): the mean payload of its last
// bytesSample stored events times its length, so that Bytes/Length — a
// backlog's bytes per event (replicate.Backlog) — is right after a
// restart too, not what this run appended spread over every event the
// segment ever held. Payloads in payload files count by their reference;
// none is read. 0 when nothing is stored.
func sampledBytes(txn *badger.Txn, stream string, seg SegmentID, start, length uint64) uint64 {
	prefix := segmentPrefix(stream, seg)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
	defer it.Close()
	var n, sum uint64
	for it.Seek(dataKey(stream, seg, ^uint64(0))); it.ValidForPrefix(prefix) && n < bytesSample; it.Next() {
		last := offsetOf(it.Item().Key())
		// An entry that does not decode counts as nothing here: readers
		// report it where it matters.
		_ = it.Item().Value(func(v []byte) error {
			_, err := entryRecords(last, v, start, length, func(_ uint64, rec []byte) bool {
				ev, ref, err := decodeRecordRef(rec)
				if err != nil {
					return false
				}
				sum += uint64(len(ev.Payload))
				if ref != nil {
					sum += ref.Length
				}
				n++
				return true
			})
			return err
		})
	}
	if n == 0 {
		return 0
	}
	return uint64(float64(sum) / float64(n) * float64(length))
}

// lastOffset returns one past the highest stored offset of a segment (0 if none).
func lastOffset(txn *badger.Txn, stream string, seg SegmentID) uint64 {
	prefix := segmentPrefix(stream, seg)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
	defer it.Close()
	it.Seek(dataKey(stream, seg, ^uint64(0)))
	if !it.ValidForPrefix(prefix) {
		return 0
	}
	return offsetOf(it.Item().Key()) + 1
}

// CreateStream creates a stream, or returns the existing one of that name
// (its configuration is not changed).
func (s *Store) CreateStream(name string, cfg StreamConfig) (*Stream, error) {
	if err := ValidateStreamName(name); err != nil {
		return nil, err
	}
	if err := cfg.Scaling.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[name]; ok {
		return st, nil
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	cfg.Scaling = cfg.Scaling.withDefaults()
	m := streamMeta{Name: name, Config: cfg}
	for i, r := range SplitRange(KeyRange{0, 1}, cfg.Scaling.MinSegments) {
		m.Segments = append(m.Segments, segMeta{ID: NewSegmentID(0, uint32(i)), Range: r})
		m.NextNumber = uint32(i + 1)
	}
	m.Head = map[SegmentID]uint64{}
	for _, sg := range m.Segments {
		m.Head[sg.ID] = 0
	}
	st := newStream(s, m)
	st.recovered = st.topologyLocked().TailCut()
	if err := s.update(func(txn *badger.Txn) error { return st.putMeta(txn) }); err != nil {
		return nil, fmt.Errorf("localstream: create stream %q: %w", name, err)
	}
	s.streams[name] = st
	return st, nil
}

// Stream returns the named stream.
func (s *Store) Stream(name string) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrStreamNotFound, name)
	}
	return st, nil
}

// Streams returns every stream, by name.
func (s *Store) Streams() []*Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Stream, 0, len(s.streams))
	for _, n := range slices.Sorted(maps.Keys(s.streams)) {
		out = append(out, s.streams[n])
	}
	return out
}

// Err returns the sticky write error, if a write failed.
func (s *Store) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.sticky
}

// Failed is closed when the store has failed: a write failed (Err returns
// why) or its directory is gone. Every later write fails; reads of what
// is durable go on. Safe for concurrent use.
func (s *Store) Failed() <-chan struct{} { return s.failed }

func (s *Store) setSticky(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.sticky == nil {
		s.sticky = fmt.Errorf("%w: %w", ErrFailed, err)
		s.log.Error("localstream: write failed; every later write fails", "err", err)
		close(s.failed)
	}
}

// PutMeta stores a metadata value (fsync'd in DurabilityAlways mode).
func (s *Store) PutMeta(key string, val []byte) error {
	if err := s.Err(); err != nil {
		return err
	}
	return s.update(func(txn *badger.Txn) error { return txn.Set(metaKey(key), val) })
}

// GetMeta returns a metadata value.
func (s *Store) GetMeta(key string) ([]byte, bool, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(metaKey(key))
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	return out, err == nil, err
}

// DeleteMeta removes a metadata value.
func (s *Store) DeleteMeta(key string) error {
	return s.update(func(txn *badger.Txn) error { return txn.Delete(metaKey(key)) })
}

// DeleteMetaPrefix removes every metadata value whose key starts with
// prefix and returns how many it removed. The deletes are committed in
// batches (a batch that would exceed Badger's transaction limit commits
// and the next one goes on), each fsync'd in DurabilityAlways mode: after
// an error some keys may be left.
func (s *Store) DeleteMetaPrefix(prefix string) (int, error) {
	if err := s.Err(); err != nil {
		return 0, err
	}
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: metaKey(prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	return s.deleteKeys(keys)
}

// DeleteMetaKeys removes the metadata values of keys (absent ones are no
// error) and returns how many deletes it committed: few transactions for
// many keys, as DeleteMetaPrefix, where DeleteMeta would sync once per key.
func (s *Store) DeleteMetaKeys(keys []string) (int, error) {
	if err := s.Err(); err != nil {
		return 0, err
	}
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = metaKey(k)
	}
	return s.deleteKeys(bk)
}

// deleteKeys deletes keys in as few transactions as Badger's limit allows.
func (s *Store) deleteKeys(keys [][]byte) (int, error) {
	done := 0
	for done < len(keys) {
		start := done
		err := s.update(func(txn *badger.Txn) error {
			for _, k := range keys[done:] {
				if err := txn.Delete(k); err != nil {
					if errors.Is(err, badger.ErrTxnTooBig) {
						return nil // commit this batch; the next goes on
					}
					return err
				}
				done++
			}
			return nil
		})
		if err == nil && done == start {
			err = badger.ErrTxnTooBig // not one delete fits: cannot progress
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// ScanMeta returns every metadata value whose key starts with prefix.
func (s *Store) ScanMeta(prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: metaKey(prefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key()[1:])] = v
		}
		return nil
	})
	return out, err
}

// Size returns the on-disk size of the LSM tree and the value log.
func (s *Store) Size() (lsm, vlog int64) { return s.db.Size() }

// Close stops accepting appends, waits for queued ones to be written and
// acknowledged, and closes the database. It is idempotent. It returns
// within Options.CloseTimeout whatever Badger is doing: on a failing disk
// Badger retries its memtable flush forever and its Close never returns;
// Close then gives up on it with ErrCloseTimeout, leaving Badger's
// goroutines and files to the process's exit. What was acknowledged is
// safe: it was synced before its ack, and the next Open replays it.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// A directory removed or replaced since the last commit's check
		// fails the store now (Err), not silently at the next start.
		s.watchDir()
		s.closeMu.Lock()
		s.closed = true
		close(s.queue)
		s.closeMu.Unlock()
		close(s.stopSync)
		done := make(chan error, 1)
		go func() {
			s.wg.Wait()
			if s.opts.Durability == DurabilityPeriodic {
				s.payloads.sync()
				s.db.Sync()
			}
			s.payloads.close()
			if err := roomToFlush(s.Dir()); err != nil {
				done <- s.closeWithoutFlush(err)
				return
			}
			done <- s.db.Close()
		}()
		t := time.NewTimer(s.opts.CloseTimeout)
		defer t.Stop()
		select {
		case s.closeErr = <-done:
		case <-t.C:
			s.closeErr = fmt.Errorf("%w after %v (store error: %v)", ErrCloseTimeout, s.opts.CloseTimeout, s.Err())
		}
	})
	return s.closeErr
}

// closeWithoutFlush ends the store without Badger's Close, which would
// write the memtable to a table that the filesystem has no room for
// (flushspace.go): the memtable's log is synced instead and replayed at
// the next Open. Badger's goroutines and its directory lock stay until the
// process exits. It returns why (wrapping ErrDiskFull).
func (s *Store) closeWithoutFlush(why error) error {
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("localstream: close without flushing (%w): sync: %w", why, err)
	}
	s.log.Warn("localstream: closed without flushing the memtable: its log is replayed at the next open", "dir", s.Dir(), "err", why)
	return fmt.Errorf("localstream: closed without flushing the memtable (its log is replayed at the next open): %w", why)
}

// ctrlReq runs fn in the committer goroutine, between two batches.
type ctrlReq struct {
	fn    func() error
	reply chan error
}

// control runs fn in the committer, serialised with offset assignment.
func (s *Store) control(ctx context.Context, fn func() error) error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	req := ctrlReq{fn: fn, reply: make(chan error, 1)}
	select {
	case s.ctrl <- req:
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return ctx.Err()
	}
	s.closeMu.RUnlock()
	return <-req.reply
}

func (s *Store) syncLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopSync:
			return
		case <-t.C:
			// Payloads first: a record durable before its payload would
			// point at bytes a power cut can lose.
			if err := errors.Join(s.payloads.sync(), s.db.Sync()); err != nil {
				s.setSticky(err)
			}
		}
	}
}

// refreshFree measures the free space of the data directory.
func (s *Store) refreshFree() error {
	if s.opts.MinFreeBytes < 0 {
		return nil
	}
	f, err := s.opts.FreeSpace(s.db.Opts().Dir)
	if err != nil {
		return fmt.Errorf("localstream: free space of %s: %w", s.db.Opts().Dir, err)
	}
	s.free.Store(f)
	s.pending.Store(0)
	return nil
}

func (s *Store) freeLoop() {
	defer s.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stopSync:
			return
		case <-t.C:
			if s.watchDir() {
				continue
			}
			if err := s.refreshFree(); err != nil {
				s.log.Warn("localstream: cannot measure free space", "err", err)
			}
			s.noteFloor()
		}
	}
}

// watchDir fails the store when its directory was removed or replaced:
// Badger would go on writing into files that no longer have a name (acks
// for data that a restart cannot find) until a flush fails, then retry it
// forever. It reports whether the store has failed. The committer calls
// it before every commit, so that no append is acknowledged into a
// removed directory (but for one racing the removal), and freeLoop every
// 250 ms while nothing is appended.
func (s *Store) watchDir() bool {
	if s.Err() != nil {
		return true
	}
	ino, err := inode(s.Dir())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.setSticky(fmt.Errorf("%w: %s was removed", ErrDirGone, s.Dir()))
	case err == nil && ino != s.dirIno:
		s.setSticky(fmt.Errorf("%w: %s was replaced (inode %d, opened %d)", ErrDirGone, s.Dir(), ino, s.dirIno))
	}
	return s.Err() != nil
}

// inode is the inode number of path (one stat, no allocation: the
// committer checks before every commit).
func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return st.Ino, nil
}

// admit reserves n bytes of disk for an append, or refuses with ErrDiskFull.
func (s *Store) admit(n int) error {
	if s.opts.MinFreeBytes < 0 {
		return nil
	}
	if free := s.free.Load() - s.pending.Add(int64(n)); free < s.opts.MinFreeBytes {
		s.pending.Add(-int64(n))
		s.diskFull.Add(1)
		return fmt.Errorf("%w: %d bytes free < %d minimum", ErrDiskFull, free, s.opts.MinFreeBytes)
	}
	return nil
}

// StoreStats are store-wide counters.
type StoreStats struct {
	// DiskFullRejects counts appends refused with ErrDiskFull.
	DiskFullRejects uint64 `json:"disk_full_rejects"`
	// FreeBytes is the last measured free space of the data directory.
	FreeBytes int64 `json:"free_bytes"`
	// QueueLen is the number of appends waiting for the committer.
	QueueLen int `json:"queue_len"`
	// BelowFloor is true while free space is below MinFreeBytes: appends
	// are refused (ErrDiskFull). MinFreeBytes is the floor.
	BelowFloor   bool  `json:"below_floor"`
	MinFreeBytes int64 `json:"min_free_bytes"`
	// Commits counts the Badger commits that appends were grouped into
	// (each one WAL sync in the default durability): appended events ÷
	// commits is the group commit's batch size.
	Commits uint64 `json:"commits"`
	// Failed is why the store failed (Err), empty while it works: every
	// write is refused until it is reopened.
	Failed string `json:"failed,omitempty"`
}

// Stats returns store-wide counters.
func (s *Store) Stats() StoreStats {
	st := StoreStats{DiskFullRejects: s.diskFull.Load(), FreeBytes: s.free.Load(), QueueLen: len(s.queue),
		BelowFloor: s.BelowFloor(), MinFreeBytes: s.opts.MinFreeBytes, Commits: s.commits.Load()}
	if err := s.Err(); err != nil {
		st.Failed = err.Error()
	}
	return st
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.db.Opts().Dir }
