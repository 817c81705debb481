package localstream

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
)

// recordVersionBatch is the version byte of a record batch: the records
// that one commit appended to one segment, in one Badger entry keyed by
// the offset of its last record (doc.go, "Record batch, version 3").
const recordVersionBatch = 3

// recordVersionBatchS2 is the version byte of a compressed record batch:
// a version-3 batch in one S2 block (doc.go, "Compressed record batch,
// version 4"), stored when that saves at least an eighth of its bytes.
const recordVersionBatchS2 = 4

// batchWriter builds the record batches of one Badger commit: one per
// segment, in offset order, or more where one would exceed maxBatchEntry.
type batchWriter struct {
	entries []batchEntry
	index   map[batchSeg]int // → the segment's last entry in entries
	// max bounds an entry's records (batchEntryMax).
	max int
}

// maxBatchEntry bounds a record batch's bytes: small beside a reader's
// fill (readAheadBytes).
const maxBatchEntry = 256 << 10

// batchEntryMax is the bound of a record batch with value threshold vt:
// maxBatchEntry, and below vt so that batches stay in the LSM tree.
func batchEntryMax(vt int64) int { return int(min(maxBatchEntry, vt/2)) }

type batchSeg struct {
	stream string
	seg    SegmentID
}

// batchEntry is the records of one commit for one segment.
type batchEntry struct {
	batchSeg
	last uint64   // offset of the last record
	recs [][]byte // encoded records (version 1 or 2), offsets last-len+1 … last
	size int      // encoded size of recs with their length prefixes
}

// add appends the record at offset off of a segment. Offsets of one
// segment come in order and contiguous: the committer assigns them so.
func (w *batchWriter) add(stream string, seg SegmentID, off uint64, rec []byte) {
	k := batchSeg{stream, seg}
	i, ok := w.index[k]
	if ok && w.entries[i].size+uvarintLen(len(rec))+len(rec) > w.max {
		ok = false // the next offsets start a new entry
	}
	if !ok {
		if w.index == nil {
			w.index = map[batchSeg]int{}
		}
		i = len(w.entries)
		w.index[k] = i
		w.entries = append(w.entries, batchEntry{batchSeg: k})
	}
	e := &w.entries[i]
	e.last = off
	e.recs = append(e.recs, rec)
	e.size += uvarintLen(len(rec)) + len(rec)
}

// each calls fn with the key and value of every entry, then forgets them.
// A segment's lone record is stored as itself (version 1 or 2), as every
// record was before batches; more are one batch.
func (w *batchWriter) each(fn func(key, val []byte) error) error {
	defer func() { w.entries = w.entries[:0]; clear(w.index) }()
	for i := range w.entries {
		e := &w.entries[i]
		key := dataKey(e.stream, e.seg, e.last)
		if len(e.recs) == 1 {
			if err := fn(key, e.recs[0]); err != nil {
				return err
			}
			continue
		}
		b := make([]byte, 0, 1+uvarintLen(len(e.recs))+e.size)
		b = append(b, recordVersionBatch)
		b = binary.AppendUvarint(b, uint64(len(e.recs)))
		for _, r := range e.recs {
			b = appendBytes(b, r)
		}
		if err := fn(key, compressBatch(b)); err != nil {
			return err
		}
	}
	return nil
}

// compressBatch returns batch b as a compressed batch when S2 saves at least
// an eighth of it, else b. The records of one commit and segment repeat
// their routing key, writer, content type and headers (60–100 bytes of a
// 200-byte telemetry event's record), and JSON payloads compress too:
// fewer bytes through Badger's WAL, memtable, table builder and tables,
// each a copy into fresh pages.
func compressBatch(b []byte) []byte {
	c := make([]byte, 1+s2.MaxEncodedLen(len(b)))
	c[0] = recordVersionBatchS2
	c = c[:1+len(s2.Encode(c[1:], b))]
	if len(c) > len(b)-len(b)/8 {
		return b
	}
	return c
}

// maxBatchDecoded bounds the decoded size of a compressed batch: a batch
// holds at most maxBatchEntry bytes of records, with its count and length
// prefixes.
const maxBatchDecoded = maxBatchEntry + 1<<10

// batchBufs holds the buffers compressed batches are decoded into.
var batchBufs = sync.Pool{New: func() any { return new([]byte) }}

// entryRecords calls fn, in offset order, for each record of one stored
// data entry (last: the offset in its key) whose offset is in [from, to).
// An entry is one record (version 1 or 2), a batch of them (version 3) or
// a compressed batch (version 4). It returns more = false when fn returned
// false or the entry reached to: the caller's scan is over. fn's rec
// aliases v, or for a compressed batch a buffer valid until entryRecords
// returns.
func entryRecords(last uint64, v []byte, from, to uint64, fn func(off uint64, rec []byte) bool) (more bool, err error) {
	if len(v) > 0 && v[0] == recordVersionBatchS2 {
		n, err := s2.DecodedLen(v[1:])
		if err != nil {
			return false, fmt.Errorf("%w: compressed batch ending at offset %d: %w", ErrCorruptRecord, last, err)
		}
		if n < 3 || n > maxBatchDecoded {
			return false, fmt.Errorf("%w: compressed batch ending at offset %d decodes to %d bytes (at most %d)", ErrCorruptRecord, last, n, maxBatchDecoded)
		}
		buf := batchBufs.Get().(*[]byte)
		defer batchBufs.Put(buf)
		if cap(*buf) < n {
			*buf = make([]byte, n)
		}
		d, err := s2.Decode((*buf)[:n], v[1:])
		if err != nil {
			return false, fmt.Errorf("%w: compressed batch ending at offset %d: %w", ErrCorruptRecord, last, err)
		}
		if d[0] != recordVersionBatch {
			return false, fmt.Errorf("%w: compressed batch ending at offset %d holds version %d, not a batch", ErrCorruptRecord, last, d[0])
		}
		v = d
	}
	if len(v) == 0 || v[0] != recordVersionBatch {
		if last < from {
			return true, nil
		}
		if last >= to {
			return false, nil
		}
		return fn(last, v), nil
	}
	d := decoder{b: v[1:]}
	n := d.uvarint("batch count")
	if d.err != nil {
		return false, d.err
	}
	if n < 2 || n > uint64(len(d.b)) || n-1 > last {
		return false, fmt.Errorf("%w: a batch of %d records ending at offset %d in %d bytes", ErrCorruptRecord, n, last, len(v))
	}
	off := last - (n - 1)
	for i := uint64(0); i < n; i, off = i+1, off+1 {
		if off >= to {
			return false, nil
		}
		rec := d.bytes("batched record")
		if d.err != nil {
			return false, d.err
		}
		if len(rec) == 0 || rec[0] == recordVersionBatch || rec[0] == recordVersionBatchS2 {
			return false, fmt.Errorf("%w: batched record %d of %d is not a record", ErrCorruptRecord, i, n)
		}
		if off >= from && !fn(off, rec) {
			return false, nil
		}
	}
	if len(d.b) != 0 {
		return false, fmt.Errorf("%w: %d bytes after a batch of %d records", ErrCorruptRecord, len(d.b), n)
	}
	return true, nil
}

// journalWriter gathers the journal bytes (WithJournal) of one commit.
type journalWriter struct {
	prefixes []string
	bytes    map[string][]byte
}

func (w *journalWriter) add(j []metaKV) {
	for _, kv := range j {
		if w.bytes == nil {
			w.bytes = map[string][]byte{}
		}
		b, ok := w.bytes[kv.key]
		if !ok {
			w.prefixes = append(w.prefixes, kv.key)
		}
		w.bytes[kv.key] = append(b, kv.val...)
	}
}

// each calls fn with the key and value of every journal entry of the
// commit of sequence seq, then forgets them.
func (w *journalWriter) each(seq uint64, fn func(key, val []byte) error) error {
	defer func() { w.prefixes = w.prefixes[:0]; clear(w.bytes) }()
	for _, p := range w.prefixes {
		if err := fn(binary.BigEndian.AppendUint64(metaKey(p), seq), w.bytes[p]); err != nil {
			return err
		}
	}
	return nil
}
