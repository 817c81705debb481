package localstream

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/skl"
)

// Truncate deletes every event before cut c. It refuses (ErrNotReplicated)
// when c is not at or before the committed cut of every sink: data is
// deleted only once replicated. With no sink registered nothing was
// replicated, so it refuses too; use Shed to drop data by policy.
// Without room for its tombstones (ErrDiskFull) it may stop part way: the
// oldest events gone, the head unmoved, no hole; truncating to the same
// cut again finishes it.
func (st *Stream) Truncate(c StreamCut) error {
	cuts, err := st.CommittedCuts()
	if err != nil {
		return err
	}
	topo := st.Topology()
	if err := topo.Validate(c); err != nil {
		return err
	}
	if len(cuts) == 0 {
		return fmt.Errorf("%w: no sink has committed stream %q", ErrNotReplicated, st.name)
	}
	for sink, cc := range cuts {
		le, err := topo.LessEq(c, cc)
		if err != nil {
			return fmt.Errorf("committed cut of %q: %w", sink, err)
		}
		if !le {
			return fmt.Errorf("%w: %s is beyond %q's committed cut %s", ErrNotReplicated, c, sink, cc)
		}
	}
	_, err = st.deleteBefore(c, nil)
	return err
}

// ShedResult says what Shed dropped.
type ShedResult struct {
	// Events and Bytes count the dropped events and their payload bytes.
	Events, Bytes uint64
	// Unreplicated counts dropped events that some sink had not committed.
	Unreplicated uint64
	// Keys holds a gap summary per routing key.
	Keys map[string]*Gap
	// Markers are the positions of the gap markers appended.
	Markers []Position
}

// Gap is the payload of a gap marker (JSON): what was dropped for one routing key.
type Gap struct {
	Reason       string   `json:"reason"`
	Events       uint64   `json:"events"`
	Bytes        uint64   `json:"bytes"`
	From         Position `json:"from"`
	To           Position `json:"to"`
	FirstTimeNs  int64    `json:"first_event_time_ns"`
	LastTimeNs   int64    `json:"last_event_time_ns"`
	Unreplicated uint64   `json:"unreplicated"`
}

// ShedWriter is the writer id of gap markers.
const ShedWriter = "localstream/shed"

// Shed drops every event before cut c by policy, whether replicated or not
// (disk pressure), and appends one gap marker per routing key that lost
// events (Flags FlagGap, payload a JSON Gap), so that the loss is explicit
// and replicated. It returns what was dropped. Earlier gap markers in the
// range are deleted too but are not lost events (not counted): a caller
// whose sinks have not committed them appends them again first (devices
// does, with BelowFloor).
//
// The markers survive a crash: they are recorded (fsync'd) before anything
// is deleted, each is cleared in the same transaction as its append, and
// Open finishes a shed that a crash interrupted. Gap markers are admitted
// below Options.MinFreeBytes: they are small, and shedding is what frees
// the space. A marker the store refuses all the same (no room for the
// memtable's table, see flushspace.go) stays recorded: FinishSheds, or
// the next Open, appends it. A shed stopped part way (ErrDiskFull: no room
// for its tombstones; the oldest events gone, the head unmoved) stays
// recorded too: FinishSheds, or the next Open, finishes the deletion and
// appends its markers.
func (st *Stream) Shed(ctx context.Context, c StreamCut, reason string) (ShedResult, error) {
	st.s.shedMu.Lock()
	defer st.s.shedMu.Unlock()
	id, hdr, res, err := st.prepareShed(c, reason)
	if err != nil {
		return res, err
	}
	if _, err := st.deleteBefore(c, &hdr); err != nil {
		return res, err
	}
	res.Markers, err = st.appendMarkers(ctx, id)
	return res, err
}

// prepareShed summarizes what a shed drops and records it, with its gap
// markers, before anything is deleted.
func (st *Stream) prepareShed(c StreamCut, reason string) (string, shedHeader, ShedResult, error) {
	if err := st.Topology().Validate(c); err != nil {
		return "", shedHeader{}, ShedResult{}, err
	}
	res, err := st.summarize(c)
	if err != nil {
		return "", shedHeader{}, res, err
	}
	id := fmt.Sprintf("%020d", st.s.opts.Now().UnixNano())
	hdr := shedHeader{ID: id, Stream: st.name, Cut: c.String(), Reason: reason, Events: res.Events, Bytes: res.Bytes}
	err = st.s.update(func(txn *badger.Txn) error {
		b, _ := json.Marshal(hdr)
		if err := txn.Set(metaKey(shedKey(st.name, id, "")), b); err != nil {
			return err
		}
		for key, g := range res.Keys {
			g.Reason = reason
			gb, _ := json.Marshal(g)
			if err := txn.Set(metaKey(shedKey(st.name, id, key)), gb); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		st.s.setSticky(err)
	}
	return id, hdr, res, err
}

// shedHeader records a shed in progress (meta key shedKey(stream, id, "")).
type shedHeader struct {
	ID     string `json:"id"`
	Stream string `json:"stream"`
	Cut    string `json:"cut"`
	Reason string `json:"reason"`
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
	// Deleted is set, with the new head and totals, once the data is gone.
	Deleted bool `json:"deleted"`
}

// shedKey is the meta key of a shed's header (key "") or of one routing
// key's pending gap marker.
func shedKey(stream, id, key string) string {
	k := "localstream/shed/" + stream + "/" + id
	if key != "" {
		k += "/k/" + key
	}
	return k
}

// appendMarkers appends the pending gap markers of shed id, each clearing
// its pending entry atomically, then clears the header.
func (st *Stream) appendMarkers(ctx context.Context, id string) ([]Position, error) {
	pending, err := st.s.ScanMeta(shedKey(st.name, id, "") + "/k/")
	if err != nil {
		return nil, err
	}
	var out []Position
	for _, k := range slices.Sorted(maps.Keys(pending)) {
		key := k[len(shedKey(st.name, id, ""))+3:]
		ev := Event{RoutingKey: key, Writer: ShedWriter, IngestTime: st.s.opts.Now().UnixNano(),
			Flags: FlagGap, ContentType: "application/json", Payload: pending[k]}
		done := make(chan error, 1)
		var pos Position
		err := st.appendAsync(ctx, ev, true, func(p Position, err error) { pos = p; done <- err }, WithMeta(k, nil))
		if err == nil {
			err = <-done
		}
		if err != nil {
			return out, fmt.Errorf("localstream: gap marker for %q: %w", key, err)
		}
		out = append(out, pos)
	}
	return out, st.s.DeleteMeta(shedKey(st.name, id, ""))
}

// recoverSheds finishes sheds interrupted by a crash: deletes again up to
// their cut (idempotent) and appends their remaining gap markers.
func (s *Store) recoverSheds() error {
	_, err := s.FinishSheds(context.Background())
	return err
}

// FinishSheds finishes the sheds whose gap markers were not all appended
// (refused: the disk was full; or interrupted) as Open does after a
// crash, so that a loss is reported without a restart once there is
// room. It returns the markers appended, per stream. Safe for concurrent
// use (sheds and FinishSheds run one at a time: a marker is appended once).
func (s *Store) FinishSheds(ctx context.Context) (map[string]int, error) {
	s.shedMu.Lock()
	defer s.shedMu.Unlock()
	out := map[string]int{}
	hdrs, err := s.ScanMeta("localstream/shed/")
	if err != nil {
		return out, err
	}
	for k, v := range hdrs {
		if strings.Contains(k, "/k/") {
			continue
		}
		var h shedHeader
		if err := json.Unmarshal(v, &h); err != nil {
			return out, fmt.Errorf("%w: shed record %s: %w", ErrCorruptRecord, k, err)
		}
		st, err := s.Stream(h.Stream)
		if err != nil {
			return out, err
		}
		c, err := ParseStreamCut(h.Cut)
		if err != nil {
			return out, err
		}
		if !h.Deleted {
			// Interrupted before the deletion was complete.
			if _, err := st.deleteBefore(c, &h); err != nil {
				return out, err
			}
		}
		pos, err := st.appendMarkers(ctx, h.ID)
		out[h.Stream] += len(pos)
		if err != nil {
			return out, err
		}
		s.log.Warn("localstream: finished an interrupted shed", "stream", h.Stream, "cut", h.Cut, "reason", h.Reason)
	}
	return out, nil
}

// summarize describes, per routing key, the events before c that are
// still stored, gap markers aside.
func (st *Stream) summarize(c StreamCut) (ShedResult, error) {
	res := ShedResult{Keys: map[string]*Gap{}}
	cuts, err := st.CommittedCuts()
	if err != nil {
		return res, err
	}
	committed := slices.Collect(maps.Values(cuts))
	topo := st.Topology()
	for id, r := range st.ranges(c) {
		if r[0] < r[1] {
			if err := st.scanRange(topo, id, r[0], r[1], committed, &res); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// ranges returns, per segment, the offsets [start, end) that lie before c.
func (st *Stream) ranges(c StreamCut) map[SegmentID][2]uint64 {
	st.mu.RLock()
	defer st.mu.RUnlock()
	topo := st.topologyLocked()
	out := map[SegmentID][2]uint64{}
	for id := range c.Positions {
		out[id] = [2]uint64{st.segs[id].Start, c.Positions[id]}
		for anc := range topo.ancestors(id) {
			out[anc] = [2]uint64{st.segs[anc].Start, st.segs[anc].final}
		}
	}
	return out
}

// deleteBefore deletes events before c and moves the head cut; a shed
// adds its totals (persisted with the new head).
func (st *Stream) deleteBefore(c StreamCut, shed *shedHeader) (ShedResult, error) {
	var res ShedResult
	err := st.s.control(context.Background(), func() error {
		ranges := st.ranges(c)
		// Oldest first: segments in the order of their epochs (a
		// segment's predecessors are of earlier ones), each from its
		// start. A deletion stopped part way (no blocks for a piece, a
		// crash) leaves every segment a contiguous run up to its end and
		// a successor untouched before its predecessors are gone: no
		// reader finds a hole; the head moves once all is deleted, and
		// deleting to the same cut again finishes it (the next Truncate,
		// retention pass, or FinishSheds / Open for a shed).
		var keys [][]byte
		for _, id := range slices.Sorted(maps.Keys(ranges)) {
			r := ranges[id]
			if r[0] >= r[1] {
				continue
			}
			var err error
			if keys, err = st.rangeKeys(keys, id, r[0], r[1]); err != nil {
				return err
			}
		}
		for len(keys) > 0 {
			n := st.s.deletionPiece(keys)
			if err := st.s.writeTombstones(keys[:n]); err != nil {
				return err
			}
			keys = keys[n:]
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		for id, r := range ranges {
			st.segs[id].Start = max(st.segs[id].Start, r[1])
		}
		head := StreamCut{Stream: st.name, Positions: st.meta.Head}
		if j, err := st.topologyLocked().Join(head, c); err == nil {
			st.meta.Head = j.Positions
		} else {
			st.meta.Head = maps.Clone(c.Positions)
		}
		if shed != nil {
			if st.meta.Shed == nil {
				st.meta.Shed = map[string]shedTotals{}
			}
			t := st.meta.Shed[shed.Reason]
			t.Events += shed.Events
			t.Bytes += shed.Bytes
			st.meta.Shed[shed.Reason] = t
			st.stats.ShedEvents += shed.Events
			st.stats.ShedBytes += shed.Bytes
		}
		err := st.s.db.Update(func(txn *badger.Txn) error { // the committer holds the write gate
			if shed != nil {
				done := *shed
				done.Deleted = true
				b, _ := json.Marshal(done)
				if err := txn.Set(metaKey(shedKey(st.name, shed.ID, "")), b); err != nil {
					return err
				}
			}
			return st.putMeta(txn)
		})
		if err != nil {
			st.s.setSticky(err)
		}
		st.broadcast()
		return err
	})
	if err == nil {
		err = st.s.control(context.Background(), st.retirePayloads)
	}
	return res, err
}

// tombstoneOverhead is what a deleted key costs in the memtable's log
// beyond the key, at most: an entry header (its lengths, meta and
// version) and a checksum.
const tombstoneOverhead = 32

// tombstoneMemOverhead is what a deleted key costs in the memtable
// (Badger's skiplist) beyond the key, at most: a node of the largest
// height, the key's version and the encoded empty value.
const tombstoneMemOverhead = int64(skl.MaxNodeSize) + 8 + 16

// deletionPiece is how many of keys (at least one) the next piece of a
// deletion takes: what fits in a quarter of a memtable, in the memtable
// (where a tombstone takes more than in the log) and in its log.
//
// A deletion is written in such pieces, each with its blocks allocated
// first (writeTombstones): one Badger write of more tombstones than a memtable
// holds makes Badger rotate the memtable more than once in the middle of
// it, and create the log of a memtable past the next one itself — with no
// blocks allocated ahead, and on a full tmpfs no blocks at all: Badger is
// then left without a memtable (its next write or read crashes). A piece
// fills the memtable at most once, into the next log, which the store
// creates and allocates ahead (walSpace.reserve).
func (s *Store) deletionPiece(keys [][]byte) int {
	budget := s.opts.MemTableSize / 4
	var cost int64
	for i, k := range keys {
		cost += int64(len(k)) + tombstoneMemOverhead
		if cost > budget && i > 0 {
			return i
		}
	}
	return len(keys)
}

// writeTombstones writes the tombstones of keys, one piece of a deletion
// (deletionPiece), in one Badger WriteBatch: their blocks in the
// memtable's log first (walspace.go), or ErrDiskFull and nothing written.
// Committer only (control).
func (s *Store) writeTombstones(keys [][]byte) error {
	var n int64
	for _, k := range keys {
		n += int64(len(k)) + tombstoneOverhead
	}
	if err := s.wal.reserve(n); err != nil {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			s.setSticky(err)
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		s.setSticky(err)
		return err
	}
	return nil
}

// rangeKeys appends to keys the keys of the entries of segment id before
// offset to, from from.
func (st *Stream) rangeKeys(keys [][]byte, id SegmentID, from, to uint64) ([][]byte, error) {
	prefix := segmentPrefix(st.name, id)
	err := st.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(dataKey(st.name, id, from)); it.ValidForPrefix(prefix); it.Next() {
			// A key holds its entry's last offset: an entry that reaches
			// to stays (a reader starts at the segment's start).
			if offsetOf(it.Item().Key()) >= to {
				break
			}
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return keys, err
}

// scanRange summarizes offsets [from, to) of one segment per routing key.
func (st *Stream) scanRange(topo Topology, id SegmentID, from, to uint64, committed []StreamCut, res *ShedResult) error {
	prefix := segmentPrefix(st.name, id)
	return st.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(dataKey(st.name, id, from)); it.ValidForPrefix(prefix); it.Next() {
			var scanErr error
			var more bool
			err := it.Item().Value(func(v []byte) error {
				var err error
				more, err = entryRecords(offsetOf(it.Item().Key()), v, from, to, func(off uint64, rec []byte) bool {
					scanErr = st.summarizeRecord(topo, Position{Segment: id, Offset: off}, rec, committed, res)
					return scanErr == nil
				})
				return err
			})
			if err == nil {
				err = scanErr
			}
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

// summarizeRecord adds one stored record at pos to res (see scanRange).
func (st *Stream) summarizeRecord(topo Topology, pos Position, b []byte, committed []StreamCut, res *ShedResult) error {
	ev, ref, err := decodeRecordRef(b)
	if err != nil {
		return err
	}
	size := uint64(len(ev.Payload))
	if ref != nil {
		size = ref.Length
	}
	if ev.Flags.Has(FlagGap) {
		// An earlier report of a loss, not a lost event: the centre
		// has it, or the shedding policy carries it (devices).
		return nil
	}
	g := res.Keys[ev.RoutingKey]
	if g == nil {
		g = &Gap{From: pos, FirstTimeNs: ev.EventTime}
		res.Keys[ev.RoutingKey] = g
	}
	g.Events++
	g.Bytes += size
	g.To = pos
	g.LastTimeNs = ev.EventTime
	res.Events++
	res.Bytes += size
	unreplicated := len(committed) == 0
	for _, cc := range committed {
		if in, err := topo.Contains(cc, pos); err == nil && !in {
			unreplicated = true
		}
	}
	if unreplicated {
		g.Unreplicated++
		res.Unreplicated++
	}
	return nil
}
