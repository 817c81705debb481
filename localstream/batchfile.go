package localstream

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
)

// Batch files. The record batches of a commit (version 3 or 4: every
// entry of two records and more) are appended to the stream's batch file,
// a payload file like the others (same directory, names, index keys,
// deletion and recovery), and Badger holds a reference to them (version
// 5, doc.go). Badger's per-commit work then no longer grows with the
// events' bytes: they are copied once, into the file's pages, instead of
// into Badger's WAL, memtable arena, table builder and tables — the
// largest share of the store's CPU per event left once batches made the
// per-entry costs per commit. A lone record (a slow writer's commit)
// stays in Badger, where it is smaller than its reference would make it
// worth.
//
// A stream has one batch file being written, shared by its segments: one
// write and one fsync per stream and commit, however many segments the
// commit touches. It dies like a payload file, when every segment's head
// is past the highest offset it holds there; heads move together (a sink
// commits a cut across the stream; shedding cuts oldest first), so
// sharing costs little reclaim granularity, and files are smaller than
// payload files (batchFileSize) to keep it fine.
const recordVersionBatchFile = 5

// batchFileSize is the size at which a stream's batch file is full: a
// quarter of a payload file, at least 1 MiB (a batch is at most 257 KiB),
// at most fileSize. What a store keeps on disk after a deletion is at most
// two batch files per stream beside the payload files' bound.
func batchFileSize(fileSize int64) int64 { return min(fileSize, max(fileSize/4, 1<<20)) }

// maxBatchRef bounds a batch file reference's length: a version 3 batch of
// maxBatchEntry, or its S2 block (stored only when smaller).
const maxBatchRef = maxBatchDecoded + 1

// appendBatch appends a record batch (version 3 or 4) of n records of
// segment k.seg, the last at offset last, to its stream's batch file and
// returns the version 5 value that refers to it. The file is fsync'd by
// flushBatches, before the commit that holds the reference. Committer
// goroutine.
func (ps *payloadStore) appendBatch(k batchSeg, last uint64, n int, batch []byte) ([]byte, error) {
	pf, err := ps.batchFile(k.stream, int64(len(batch)))
	if err != nil {
		return nil, err
	}
	if _, err := pf.f.WriteAt(batch, pf.size); err != nil {
		return nil, fmt.Errorf("localstream: batch file %s: %w", pf.f.Name(), err)
	}
	ref := payloadRef{File: pf.seq, Offset: uint64(pf.size), Length: uint64(len(batch)),
		CRC: crc32.Checksum(batch, castagnoli)}
	pf.size += int64(len(batch))
	pf.maxOff[k.seg] = max(pf.maxOff[k.seg], last)
	if ps.touched == nil {
		ps.touched = map[*payloadFile]bool{}
	}
	ps.touched[pf] = true
	v := binary.AppendUvarint([]byte{recordVersionBatchFile}, uint64(n))
	return appendPayloadRef(v, ref), nil
}

// batchFile returns the stream's batch file to write n more bytes to,
// starting a new one when the current one is full.
func (ps *payloadStore) batchFile(stream string, n int64) (*payloadFile, error) {
	if pf := ps.batchActive[stream]; pf != nil && (pf.size == 0 || pf.size+n <= batchFileSize(ps.fileSize)) {
		return pf, nil
	}
	if err := syncFull(ps.batchActive[stream]); err != nil {
		return nil, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pf, err := ps.create(stream)
	if err != nil {
		return nil, err
	}
	ps.batchActive[stream] = pf
	return pf, nil
}

// flushBatches fsyncs (when sync is set) the batch files appendBatch wrote
// to since the last call and returns their index keys, to be written in
// the commit that refers to the batches. Committer goroutine.
func (ps *payloadStore) flushBatches(sync bool) (map[string][]byte, error) {
	if len(ps.touched) == 0 {
		return nil, nil
	}
	defer clear(ps.touched)
	return indexOf(ps.touched, sync)
}

// create starts the stream's next payload or batch file. ps.mu held.
func (ps *payloadStore) create(stream string) (*payloadFile, error) {
	seq := max(ps.next[stream], 1)
	ps.next[stream] = seq + 1
	f, err := os.OpenFile(ps.path(stream, seq), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localstream: payload file: %w", err)
	}
	pf := &payloadFile{stream: stream, seq: seq, f: f, maxOff: map[SegmentID]uint64{}}
	ps.add(pf)
	return pf, nil
}

// testHookBatchRead, when set (tests), runs before a batch is read from
// its file: a shed can then delete the file between the reader's look at
// the segment and the read, a timing the race leaves rare.
var testHookBatchRead func()

// decodeBatchRef decodes a version 5 value: the record count and where the
// batch is.
func decodeBatchRef(v []byte) (n uint64, ref payloadRef, err error) {
	d := decoder{b: v[1:]}
	n = d.uvarint("batch count")
	ref = payloadRef{File: d.uvarint("batch file"), Offset: d.uvarint("batch offset"), Length: d.uvarint("batch length")}
	if d.err != nil {
		return 0, ref, d.err
	}
	if len(d.b) != 4 {
		return 0, ref, fmt.Errorf("%w: batch file reference with %d bytes of checksum", ErrCorruptRecord, len(d.b))
	}
	ref.CRC = binary.BigEndian.Uint32(d.b)
	if n < 2 || ref.Length < 3 || ref.Length > maxBatchRef {
		return 0, ref, fmt.Errorf("%w: batch file reference to %d records in %d bytes", ErrCorruptRecord, n, ref.Length)
	}
	return n, ref, nil
}

// entryRecordsOf is entryRecords for an entry of stream as stored: a
// batch file reference (version 5) is read from its file first.
func (s *Store) entryRecordsOf(stream string, last uint64, v []byte, from, to uint64, fn func(off uint64, rec []byte) bool) (bool, error) {
	if len(v) == 0 || v[0] != recordVersionBatchFile {
		return entryRecords(last, v, from, to, fn)
	}
	n, ref, err := decodeBatchRef(v)
	if err == nil && n-1 > last {
		err = fmt.Errorf("%w: a batch of %d records ending at offset %d", ErrCorruptRecord, n, last)
	}
	if err != nil {
		return false, fmt.Errorf("%w (entry ending at offset %d)", err, last)
	}
	switch {
	case last < from:
		return true, nil
	case last-(n-1) >= to:
		return false, nil
	}
	buf := batchBufs.Get().(*[]byte)
	defer batchBufs.Put(buf)
	if uint64(cap(*buf)) < ref.Length {
		*buf = make([]byte, ref.Length)
	}
	b := (*buf)[:ref.Length]
	if testHookBatchRead != nil {
		testHookBatchRead()
	}
	if err := s.payloads.readInto(stream, ref, b); err != nil {
		return false, err
	}
	if b[0] != recordVersionBatch && b[0] != recordVersionBatchS2 {
		return false, fmt.Errorf("%w: batch file entry ending at offset %d holds version %d, not a batch", ErrCorruptRecord, last, b[0])
	}
	return entryRecords(last, b, from, to, fn)
}
