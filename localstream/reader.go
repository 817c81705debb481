package localstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Reader iterates a stream from one cut to another (or the live tail),
// honouring the predecessor rule: a successor segment is read only after
// all its predecessors are exhausted, so each routing key comes out in
// append order across splits and merges. Only durable events are read.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	st *Stream
	// frontier is the reader's current cut: segment → next offset. An
	// exhausted segment stays until its successor can start (a merge waits
	// for all its predecessors).
	frontier  map[SegmentID]uint64
	exhausted map[SegmentID]bool
	to        map[SegmentID]uint64 // nil: unbounded
	order     []SegmentID          // round-robin order of the frontier
	rr        int
	// buf[head:] is read ahead from one segment; buf's array is reused
	// by the next fill.
	buf    []Record
	head   int
	maxBuf int
	// arena holds the decoded records' strings and bytes (see readArena).
	arena readArena
	// reshapes counts the frontier's changes not made by returning a
	// record (see Reshapes).
	reshapes uint64
}

// NewReader returns a reader of the events after from and, when to is
// not nil, before to. Both cuts are validated against the stream, and from
// must not be after to.
func (st *Stream) NewReader(from StreamCut, to *StreamCut) (*Reader, error) {
	topo := st.Topology()
	if err := topo.Validate(from); err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	r := &Reader{st: st, frontier: maps.Clone(from.Positions), exhausted: map[SegmentID]bool{}, maxBuf: 256}
	if to != nil {
		if err := topo.Validate(*to); err != nil {
			return nil, fmt.Errorf("to: %w", err)
		}
		le, err := topo.LessEq(from, *to)
		if err != nil {
			return nil, err
		}
		if !le {
			return nil, fmt.Errorf("%w: from %s is after to %s", ErrForeignCut, from, *to)
		}
		r.to = maps.Clone(to.Positions)
	}
	r.reorder()
	return r, nil
}

func (r *Reader) reorder() {
	r.order = slices.Sorted(maps.Keys(r.frontier))
	r.rr = 0
}

// Cut returns the cut just after the last record returned.
func (r *Reader) Cut() StreamCut {
	return StreamCut{Stream: r.st.name, Positions: maps.Clone(r.frontier)}
}

// Reshapes counts the changes of the reader's cut not made by returning
// a record: a segment skipped to its end (holes left by shedding or
// failed writes) or replaced by its successors. While it stays the same,
// the cut after a record is the cut after the previous one (or the start
// cut) with the record's segment at its offset + 1, so a caller that
// needs the cut after every record can derive it instead of calling Cut.
func (r *Reader) Reshapes() uint64 { return r.reshapes }

// Close releases the reader. It is idempotent.
func (r *Reader) Close() error { r.buf, r.head, r.arena = nil, 0, readArena{}; return nil }

// Next returns the next durable record, waiting for one while the reader
// is at the tail. It returns ErrEndOfCut when a bounded reader reached its
// end cut, or ctx.Err().
func (r *Reader) Next(ctx context.Context) (Record, error) {
	for {
		ch := r.st.changed()
		rec, err := r.TryNext()
		if !errors.Is(err, ErrCaughtUp) {
			return rec, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		}
	}
}

// TryNext returns the next durable record without waiting: ErrCaughtUp when
// there is none yet, ErrEndOfCut when a bounded reader reached its end.
func (r *Reader) TryNext() (Record, error) {
	for {
		if r.head < len(r.buf) {
			rec := r.buf[r.head]
			r.head++
			r.frontier[rec.Segment] = rec.Offset + 1
			return rec, nil
		}
		clear(r.buf) // the records returned are the callers'; drop their references here
		r.buf, r.head = r.buf[:0], 0
		progressed, bounded, err := r.fill()
		if err != nil {
			return Record{}, err
		}
		if len(r.buf) > 0 || progressed {
			continue
		}
		if bounded {
			return Record{}, ErrEndOfCut
		}
		return Record{}, ErrCaughtUp
	}
}

// segView is what the reader needs to know of a segment, read under lock.
type segView struct {
	length, final uint64
	start         uint64 // first offset still stored
	sealed        bool
	succs         []SegmentID
	predsOf       map[SegmentID][]SegmentID
}

// fill reads ahead from the next segment that has data, or moves past
// exhausted segments. progressed reports a change of the frontier without
// records; bounded reports that every frontier segment reached the end cut.
func (r *Reader) fill() (progressed, bounded bool, err error) {
	bounded = r.to != nil
	for range len(r.order) {
		id := r.order[r.rr%len(r.order)]
		r.rr++
		next := r.frontier[id]
		if r.exhausted[id] {
			continue
		}
		v := r.view(id)
		limit := v.length
		if end, ok := r.to[id]; ok {
			limit = min(limit, end)
			if next >= end {
				continue // reached the end cut here
			}
		}
		bounded = false
		if next < limit {
			// A record batch that a truncation or a shed cut through
			// still holds the records below the segment's start.
			from := max(next, v.start)
			if err := r.readAhead(id, from, limit); err != nil {
				if errors.Is(err, ErrTruncated) && r.view(id).start > from {
					// A truncation or shed passed this read and deleted
					// the payload file it was reading: read on from the
					// new start (what it buffered is still in order).
					return true, false, nil
				}
				return false, false, err
			}
			if len(r.buf) > 0 {
				return true, false, nil
			}
			r.frontier[id] = limit // only holes (shed or failed writes) below limit
			r.reshapes++
			return true, false, nil
		}
		if v.sealed && v.length >= v.final && next >= v.final {
			r.exhausted[id] = true
			r.advance(id, v)
			return true, false, nil
		}
	}
	return false, bounded, nil
}

// view snapshots one segment.
func (r *Reader) view(id SegmentID) segView {
	st := r.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	sg := st.segs[id]
	v := segView{length: sg.Length, final: sg.final, start: sg.Start, sealed: sg.Sealed, succs: sg.Successors}
	if len(sg.Successors) > 0 { // an open segment (the common case) allocates nothing here
		v.predsOf = make(map[SegmentID][]SegmentID, len(sg.Successors))
	}
	for _, s := range sg.Successors {
		v.predsOf[s] = st.segs[s].Predecessors
	}
	return v
}

// advance starts the successors of an exhausted segment whose
// predecessors are all exhausted, removing those predecessors from the frontier.
func (r *Reader) advance(id SegmentID, v segView) {
	var start []SegmentID
	for _, s := range v.succs {
		if _, in := r.frontier[s]; in {
			continue
		}
		ready := true
		for _, p := range v.predsOf[s] {
			ready = ready && r.exhausted[p]
		}
		if ready {
			start = append(start, s)
		}
	}
	for _, s := range start {
		for _, p := range v.predsOf[s] {
			delete(r.frontier, p)
			delete(r.exhausted, p)
		}
		r.frontier[s] = 0
	}
	r.reshapes++
	r.reorder()
}

// readAheadBytes bounds one read-ahead fill.
const readAheadBytes = 1 << 20

// readAhead buffers up to maxBuf records of segment id in [from, limit).
func (r *Reader) readAhead(id SegmentID, from, limit uint64) error {
	st := r.st
	prefix := segmentPrefix(st.name, id)
	return st.s.db.View(func(txn *badger.Txn) error {
		// No value prefetching: the iterator would copy up to PrefetchSize values
		// ahead (megabytes of video chunks) that a bounded fill then discards.
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		bytes := 0
		for it.Seek(dataKey(st.name, id, from)); it.ValidForPrefix(prefix); it.Next() {
			// Bounded by records and bytes, so that the first record of a
			// fill comes back soon even when events are large video chunks.
			if len(r.buf) >= r.maxBuf || bytes >= readAheadBytes {
				break
			}
			var more bool
			last := offsetOf(it.Item().Key())
			err := it.Item().Value(func(b []byte) error {
				var derr error
				m, err := entryRecords(last, b, from, limit, func(off uint64, rec []byte) bool {
					var ev Event
					if ev, derr = st.s.decodeStored(st.name, rec, &r.arena); derr != nil {
						derr = fmt.Errorf("stream %s segment %s offset %d: %w", st.name, id, off, derr)
						return false
					}
					bytes += len(rec) + len(ev.Payload)
					r.buf = append(r.buf, Record{Position: Position{Segment: id, Offset: off}, Event: ev})
					return len(r.buf) < r.maxBuf && bytes < readAheadBytes
				})
				more = m
				if derr != nil {
					return derr
				}
				if err != nil {
					return fmt.Errorf("stream %s segment %s entry %d: %w", st.name, id, last, err)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
		return nil
	})
}

// ReadAll returns every retained durable event from the head cut to the
// tail cut, in reader order (each routing key in append order). It holds
// the whole stream in memory: for tools, verification and tests.
func (st *Stream) ReadAll() ([]Record, error) {
	tail := st.TailCut()
	r, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []Record
	for {
		rec, err := r.TryNext()
		if errors.Is(err, ErrEndOfCut) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}
