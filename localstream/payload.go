package localstream

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Payload files. Large payloads (video chunks: the normal case) do not go
// into Badger, whose value log gives deleted bytes back only by rewriting
// the live entries of a file elsewhere, and keeps garbage up to its
// discard ratio. They go to append-only files, each holding one segment's
// payloads in offset order, written by the committer:
//
//	<store>/payloads/<stream>.<seq, 10 digits>   payloads back to back, nothing else
//
// The record in Badger (version 2, see doc.go) holds a reference instead
// of the bytes: file seq, offset, length and CRC-32C. Each file's index —
// the highest offset per segment whose payload it holds — is metadata
// written in the same Badger transaction as the first record of each batch
// that uses the file, so it is never behind the records:
//
//	x | "localstream/payload/" <stream> "/" <seq, 10 digits>  →  {"<segment id>": max offset, ...} (JSON)
//
// A file is dead once every one of its segments' heads is past its
// highest offset there: Truncate and Shed move heads oldest first, so
// files die whole and in order, and are deleted (index key first, then the
// file) right after the head moves. Nothing is rewritten; what stays on
// disk after a deletion is at most one partly dead file per segment, plus
// the file being written: 2 × Options.ValueLogFileSize per open segment.
//
// Durability: the payloads of a batch are written, and fsync'd
// (DurabilityAlways), before its Badger commit, so a durable record's
// payload is durable; in DurabilityPeriodic the files being written are
// synced before Badger on every tick, and a full file when the next one
// starts. After a crash the file being written may end with
// payloads of a batch that never committed: nothing refers to them, and a
// new file is started. A file without an index key (written, never
// committed; or its deletion interrupted) is removed at Open.
const payloadDir = "payloads"

// payloadThreshold: payloads at least this large go to payload files.
const payloadThreshold = 4 << 10

// payloadMetaPrefix prefixes the payload files' index keys (PutMeta space).
const payloadMetaPrefix = "localstream/payload/"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// payloadRef is where a record's payload is (record version 2).
type payloadRef struct {
	File, Offset, Length uint64
	CRC                  uint32
}

// payloadFile is one payload file.
type payloadFile struct {
	stream string
	seq    uint64
	f      *os.File
	size   int64 // bytes written (the next payload's offset)
	// maxOff is the highest offset per segment whose payload is here.
	maxOff map[SegmentID]uint64
}

func (pf *payloadFile) metaKey() string {
	return fmt.Sprintf("%s%s/%010d", payloadMetaPrefix, pf.stream, pf.seq)
}

// payloadStore holds the payload files of a store.
type payloadStore struct {
	dir      string
	fileSize int64

	// mu guards files and active; readers hold it for reading while they
	// read a file, retire for writing while it closes one.
	mu     sync.RWMutex
	files  map[string]map[uint64]*payloadFile // stream → seq → file
	active map[string]*payloadFile            // activeKey → the file being written
	next   map[string]uint64                  // stream → next seq
}

// openPayloads opens the payload files of a store: every file with an
// index key; files without one are removed, index keys without a file
// dropped (the deletion was interrupted). New payloads go to new files.
func openPayloads(dir string, fileSize int64, db *badger.DB) (*payloadStore, error) {
	ps := &payloadStore{dir: filepath.Join(dir, payloadDir), fileSize: fileSize,
		files: map[string]map[uint64]*payloadFile{}, active: map[string]*payloadFile{}, next: map[string]uint64{}}
	if err := os.MkdirAll(ps.dir, 0o755); err != nil {
		return nil, fmt.Errorf("localstream: payload files: %w", err)
	}
	index := map[string][]byte{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: metaKey(payloadMetaPrefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			index[string(it.Item().Key()[1+len(payloadMetaPrefix):])] = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("localstream: payload files: %w", err)
	}
	entries, err := os.ReadDir(ps.dir)
	if err != nil {
		return nil, fmt.Errorf("localstream: payload files: %w", err)
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		stream, seq, ok := parsePayloadName(e.Name())
		if !ok {
			continue
		}
		ps.next[stream] = max(ps.next[stream], seq+1)
		key := fmt.Sprintf("%s/%010d", stream, seq)
		if _, known := index[key]; !known {
			os.Remove(filepath.Join(ps.dir, e.Name())) // never committed, or already dead
			continue
		}
		onDisk[key] = true
	}
	var stale [][]byte
	for key, v := range index {
		stream, seqText, _ := strings.Cut(key, "/")
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: payload index key %q", ErrCorruptRecord, key)
		}
		ps.next[stream] = max(ps.next[stream], seq+1)
		if !onDisk[key] {
			stale = append(stale, metaKey(payloadMetaPrefix+key))
			continue
		}
		pf := &payloadFile{stream: stream, seq: seq}
		if err := json.Unmarshal(v, &pf.maxOff); err != nil {
			return nil, fmt.Errorf("%w: payload index %q: %w", ErrCorruptRecord, key, err)
		}
		if pf.f, err = os.Open(ps.path(stream, seq)); err != nil {
			return nil, fmt.Errorf("localstream: payload files: %w", err)
		}
		ps.add(pf)
	}
	if len(stale) > 0 {
		// An index key without its file: dead files whose deletion was
		// interrupted (the key goes first) or, if records still point
		// there, lost payloads that reads report as corrupt.
		err := db.Update(func(txn *badger.Txn) error {
			for _, k := range stale {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("localstream: payload files: %w", err)
		}
	}
	return ps, nil
}

func parsePayloadName(name string) (string, uint64, bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || len(name)-i-1 != 10 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(name[i+1:], 10, 64)
	if err != nil || ValidateStreamName(name[:i]) != nil {
		return "", 0, false
	}
	return name[:i], seq, true
}

func activeKey(stream string, seg SegmentID) string { return stream + "/" + seg.String() }

func (ps *payloadStore) path(stream string, seq uint64) string {
	return filepath.Join(ps.dir, fmt.Sprintf("%s.%010d", stream, seq))
}

// add registers pf. Lock should be held (or the store not yet shared).
func (ps *payloadStore) add(pf *payloadFile) {
	if ps.files[pf.stream] == nil {
		ps.files[pf.stream] = map[uint64]*payloadFile{}
	}
	ps.files[pf.stream][pf.seq] = pf
}

// write appends the payloads of a batch (committer goroutine), fsyncs them
// when sync is set, fills in each record's reference, and returns the
// index keys to write with the batch's first commit.
func (ps *payloadStore) write(batch []*appendReq, pos []Position, sync bool) (map[string][]byte, error) {
	touched := map[*payloadFile]bool{}
	for i, r := range batch {
		if r.payload == nil {
			continue
		}
		pf, err := ps.activeFile(r.st.name, pos[i].Segment, int64(len(r.payload)), sync)
		if err != nil {
			return nil, err
		}
		if _, err := pf.f.WriteAt(r.payload, pf.size); err != nil {
			return nil, fmt.Errorf("localstream: payload file %s: %w", pf.f.Name(), err)
		}
		ref := payloadRef{File: pf.seq, Offset: uint64(pf.size), Length: uint64(len(r.payload)),
			CRC: crc32.Checksum(r.payload, castagnoli)}
		r.rec = appendPayloadRef(r.rec, ref)
		pf.size += int64(len(r.payload))
		pf.maxOff[pos[i].Segment] = max(pf.maxOff[pos[i].Segment], pos[i].Offset)
		touched[pf] = true
	}
	index := map[string][]byte{}
	for pf := range touched {
		if sync {
			if err := pf.f.Sync(); err != nil {
				return nil, fmt.Errorf("localstream: payload file %s: %w", pf.f.Name(), err)
			}
		}
		b, _ := json.Marshal(pf.maxOff)
		index[pf.metaKey()] = b
	}
	return index, nil
}

// activeFile returns the segment's file to write n more bytes to,
// starting a new one when the current one is full. Each segment has its
// own files, so that a file dies when its segment's head passes it,
// however the other segments are truncated. synced: the batch's payloads
// are fsync'd before its commit (DurabilityAlways). Committer goroutine,
// the only writer of active.
func (ps *payloadStore) activeFile(stream string, seg SegmentID, n int64, synced bool) (*payloadFile, error) {
	key := activeKey(stream, seg)
	full := ps.active[key]
	if full != nil && (full.size == 0 || full.size+n <= ps.fileSize) {
		return full, nil
	}
	// In DurabilityPeriodic the periodic sync covers the files being
	// written only: a full one may still hold bytes its records need.
	// Synced outside the lock, so that readers go on meanwhile.
	if full != nil && !synced {
		if err := full.f.Sync(); err != nil {
			return nil, fmt.Errorf("localstream: payload file %s: %w", full.f.Name(), err)
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	seq := max(ps.next[stream], 1)
	ps.next[stream] = seq + 1
	f, err := os.OpenFile(ps.path(stream, seq), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localstream: payload file: %w", err)
	}
	pf := &payloadFile{stream: stream, seq: seq, f: f, maxOff: map[SegmentID]uint64{}}
	ps.active[key] = pf
	ps.add(pf)
	return pf, nil
}

// testHookPayloadRead, when set (tests), runs before a payload is read
// from its file: a shed can then delete the file between the reader's
// look at the segment and the read, a timing the race leaves rare.
var testHookPayloadRead func()

// read returns the payload ref points to. A file already deleted means the
// event is before the stream's head (ErrTruncated).
func (ps *payloadStore) read(stream string, ref payloadRef) ([]byte, error) {
	if testHookPayloadRead != nil {
		testHookPayloadRead()
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	pf := ps.files[stream][ref.File]
	if pf == nil {
		return nil, fmt.Errorf("%w: payload file %d of %s deleted", ErrTruncated, ref.File, stream)
	}
	b := make([]byte, ref.Length)
	if _, err := pf.f.ReadAt(b, int64(ref.Offset)); err != nil {
		return nil, fmt.Errorf("%w: payload %d+%d in file %d of %s: %w", ErrCorruptRecord, ref.Offset, ref.Length, ref.File, stream, err)
	}
	if crc32.Checksum(b, castagnoli) != ref.CRC {
		return nil, fmt.Errorf("%w: payload %d+%d in file %d of %s: checksum mismatch", ErrCorruptRecord, ref.Offset, ref.Length, ref.File, stream)
	}
	return b, nil
}

// dead returns the files of st, the one being written aside, whose every
// event is before the stream's head. Committer goroutine.
func (ps *payloadStore) dead(st *Stream) []*payloadFile {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	st.mu.RLock()
	defer st.mu.RUnlock()
	var out []*payloadFile
	for _, seq := range slices.Sorted(maps.Keys(ps.files[st.name])) {
		pf := ps.files[st.name][seq]
		writing := false // the file its open segment is being written to
		for seg := range pf.maxOff {
			sg := st.segs[seg]
			writing = writing || pf == ps.active[activeKey(st.name, seg)] && sg != nil && !sg.Sealed
		}
		if writing {
			continue
		}
		gone := true
		for seg, off := range pf.maxOff {
			if sg := st.segs[seg]; sg != nil && sg.Start <= off {
				gone = false
				break
			}
		}
		if gone {
			out = append(out, pf)
		}
	}
	return out
}

// remove deletes dead files whose index keys are already deleted.
func (ps *payloadStore) remove(files []*payloadFile) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var errs []error
	for _, pf := range files {
		delete(ps.files[pf.stream], pf.seq)
		for seg := range pf.maxOff {
			if key := activeKey(pf.stream, seg); ps.active[key] == pf {
				delete(ps.active, key)
			}
		}
		pf.f.Close()
		if err := os.Remove(pf.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sync fsyncs the files being written (periodic mode).
func (ps *payloadStore) sync() error {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	var errs []error
	for _, pf := range ps.active {
		errs = append(errs, pf.f.Sync())
	}
	return errors.Join(errs...)
}

// close closes every file.
func (ps *payloadStore) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, files := range ps.files {
		for _, pf := range files {
			pf.f.Close()
		}
	}
}

// appendPayloadRef appends a record version 2's reference.
func appendPayloadRef(b []byte, ref payloadRef) []byte {
	b = binary.AppendUvarint(b, ref.File)
	b = binary.AppendUvarint(b, ref.Offset)
	b = binary.AppendUvarint(b, ref.Length)
	return binary.BigEndian.AppendUint32(b, ref.CRC)
}

// retirePayloads deletes the payload files of st that died when its head
// moved: index keys first (in one Badger commit), then the files.
// Committer goroutine, write gate held.
func (st *Stream) retirePayloads() error {
	ps := st.s.payloads
	dead := ps.dead(st)
	if len(dead) == 0 {
		return nil
	}
	err := st.s.db.Update(func(txn *badger.Txn) error {
		for _, pf := range dead {
			if err := txn.Delete(metaKey(pf.metaKey())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("localstream: retiring payload files: %w", err)
	}
	return ps.remove(dead)
}

// decodeStored decodes a stored record of stream into a (see
// decodeRecordIn), reading its payload from its payload file when it has
// one.
func (s *Store) decodeStored(stream string, b []byte, a *readArena) (Event, error) {
	ev, ref, err := decodeRecordIn(b, a)
	if err != nil || ref == nil {
		return ev, err
	}
	ev.Payload, err = s.payloads.read(stream, *ref)
	return ev, err
}
