package localstream

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// streamMeta is the stored description of a stream (JSON under prefixStream).
// Segment lengths are not stored for open segments: they are recovered from
// the data keys, so an append needs no metadata write.
type streamMeta struct {
	Name       string                `json:"name"`
	Config     StreamConfig          `json:"config"`
	Epoch      uint32                `json:"epoch"`       // newest epoch
	NextNumber uint32                `json:"next_number"` // next segment number
	Segments   []segMeta             `json:"segments"`
	Head       map[SegmentID]uint64  `json:"head"` // truncation cut
	LastScale  time.Time             `json:"last_scale"`
	Shed       map[string]shedTotals `json:"shed,omitempty"`
}

type segMeta struct {
	ID           SegmentID   `json:"id"`
	Range        KeyRange    `json:"range"`
	Sealed       bool        `json:"sealed,omitempty"`
	Final        uint64      `json:"final,omitempty"` // length when sealed
	Start        uint64      `json:"start,omitempty"`
	Predecessors []SegmentID `json:"predecessors,omitempty"`
	Successors   []SegmentID `json:"successors,omitempty"`
}

// shedTotals counts what shedding dropped, per reason.
type shedTotals struct {
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
}

// segState is a segment in memory.
type segState struct {
	Segment         // Length is the durable length, guarded by Stream.mu
	assigned uint64 // next offset to assign; committer goroutine only
	final    uint64 // sealed: the final length
	// rate window (committer goroutine only)
	winEvents, winBytes uint64
}

// Stream is one named stream of a Store. It is safe for concurrent use.
type Stream struct {
	s    *Store
	name string

	// mu guards the fields below.
	mu     sync.RWMutex
	meta   streamMeta // Segments is rebuilt from segs on write
	segs   map[SegmentID]*segState
	open   []*segState   // open segments by range
	notify chan struct{} // closed and replaced when durable state changes
	stats  StreamStats
	// winStart is the start of the current rate window (committer only).
	winStart time.Time
	// recovered is the tail found at Open (see RecoveredTail).
	recovered StreamCut
}

// StreamStats are counters of a stream since the store was opened.
type StreamStats struct {
	// Appended counts durable appends.
	Appended uint64 `json:"appended"`
	// AppendedBytes counts durable payload bytes.
	AppendedBytes uint64 `json:"appended_bytes"`
	// Scales counts splits and merges.
	Scales uint64 `json:"scales"`
	// ShedEvents counts events dropped by explicit shedding (all time).
	ShedEvents uint64 `json:"shed_events"`
	// ShedBytes counts bytes dropped by explicit shedding (all time).
	ShedBytes uint64 `json:"shed_bytes"`
}

func newStream(s *Store, m streamMeta) *Stream {
	st := &Stream{s: s, name: m.Name, meta: m, segs: map[SegmentID]*segState{}, notify: make(chan struct{})}
	for _, sm := range m.Segments {
		st.segs[sm.ID] = &segState{
			Segment: Segment{ID: sm.ID, Range: sm.Range, Sealed: sm.Sealed, Start: sm.Start,
				Predecessors: sm.Predecessors, Successors: sm.Successors},
			final: sm.Final,
		}
	}
	for _, t := range m.Shed {
		st.stats.ShedEvents += t.Events
		st.stats.ShedBytes += t.Bytes
	}
	st.rebuildOpen()
	return st
}

// rebuildOpen recomputes the open list. Lock should be held.
func (st *Stream) rebuildOpen() {
	st.open = st.open[:0]
	for _, sg := range st.segs {
		if !sg.Sealed {
			st.open = append(st.open, sg)
		}
	}
	slices.SortFunc(st.open, func(a, b *segState) int { return cmp.Compare(a.Range.Low, b.Range.Low) })
}

// putMeta writes the stream's metadata in txn. Lock should be held (or the
// stream not yet shared).
func (st *Stream) putMeta(txn *badger.Txn) error {
	st.meta.Segments = st.meta.Segments[:0]
	for _, id := range slices.Sorted(maps.Keys(st.segs)) {
		sg := st.segs[id]
		st.meta.Segments = append(st.meta.Segments, segMeta{ID: id, Range: sg.Range, Sealed: sg.Sealed,
			Final: sg.final, Start: sg.Start, Predecessors: sg.Predecessors, Successors: sg.Successors})
	}
	b, err := json.Marshal(st.meta)
	if err != nil {
		return err
	}
	return txn.Set(streamKey(st.name), b)
}

// Name returns the stream's name.
func (st *Stream) Name() string { return st.name }

// Config returns the stream's configuration.
func (st *Stream) Config() StreamConfig {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.meta.Config
}

// Stats returns the stream's counters.
func (st *Stream) Stats() StreamStats {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.stats
}

// Topology returns a snapshot of the stream's segments with their durable lengths.
func (st *Stream) Topology() Topology {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.topologyLocked()
}

// topologyLocked: Lock should be held (read is enough).
func (st *Stream) topologyLocked() Topology {
	t := Topology{Stream: st.name, Segments: make(map[SegmentID]Segment, len(st.segs))}
	for id, sg := range st.segs {
		seg := sg.Segment
		seg.Predecessors = slices.Clone(seg.Predecessors)
		seg.Successors = slices.Clone(seg.Successors)
		t.Segments[id] = seg
	}
	return t
}

// HeadCut returns the first retained position of the stream (after truncation).
func (st *Stream) HeadCut() StreamCut {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return StreamCut{Stream: st.name, Positions: maps.Clone(st.meta.Head)}
}

// TailCut returns the cut just after the last durable event.
func (st *Stream) TailCut() StreamCut {
	return st.Topology().TailCut()
}

// changed returns a channel closed at the next durable change.
func (st *Stream) changed() <-chan struct{} {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.notify
}

// broadcast wakes readers. Lock should be held.
func (st *Stream) broadcast() {
	close(st.notify)
	st.notify = make(chan struct{})
}

// AppendOption modifies an append.
type AppendOption func(*appendReq)

// WithMeta writes a metadata key (see Store.PutMeta) in the same Badger
// transaction as the event: both are durable together or not at all. A
// nil value deletes the key.
func WithMeta(key string, value []byte) AppendOption {
	return func(r *appendReq) { r.metas = append(r.metas, metaKV{key, value}) }
}

// WithJournal adds b to the journal named prefix, in the same Badger
// transaction as the event. The bytes that the appends of one commit add
// to one journal are one metadata entry — concatenated in append order —
// under prefix + a big-endian uint64 sequence that increases from commit
// to commit and across reopens: ScanMeta(prefix) in key order is the
// journal in append order. For per-event metadata that is read rarely
// (the MQTT dedup records): one Badger entry per commit instead of one
// per event. Entries are deleted with DeleteMetaKeys (or DeleteMeta).
func WithJournal(prefix string, b []byte) AppendOption {
	return func(r *appendReq) { r.journal = append(r.journal, metaKV{prefix, b}) }
}

// JournalSeq returns the sequence of a journal entry's key (see
// WithJournal), and false if key is not one of prefix's entries.
func JournalSeq(prefix, key string) (uint64, bool) {
	if len(key) != len(prefix)+8 || key[:len(prefix)] != prefix {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(key[len(prefix):])), true
}

// BelowFloor admits a gap marker below Options.MinFreeBytes, as Shed's
// own markers are: a report of a loss is small, and it must not wait for
// the space that its shed is freeing. Only for FlagGap events.
func BelowFloor() AppendOption {
	return func(r *appendReq) { r.belowFloor = true }
}

type metaKV struct {
	key string
	val []byte
}

// appendReq is one queued append.
type appendReq struct {
	st    *Stream
	hash  float64
	rec   []byte
	size  int // payload bytes
	metas []metaKV
	// journal is WithJournal's (prefix, bytes).
	journal []metaKV
	cb      func(Position, error)
	// belowFloor admits the append below Options.MinFreeBytes (gap markers).
	belowFloor bool
	// payload is a large payload that goes to a payload file; rec then
	// lacks its reference until the committer writes it.
	payload []byte
	// group are the appends queued with this one by AppendGroupAsync (on
	// its first): the committer takes them into the same batch.
	group []*appendReq
	// groupCB (on a group's last append, cb nil) is AppendGroupAsync's
	// callback: it takes the positions of the groupN appends ending here.
	groupCB func([]Position, error)
	groupN  int
}

// Append appends ev and returns its position once it is durable (see
// Durability). Appends of one goroutine land in call order; appends from
// different goroutines are ordered by their arrival in the queue. If ctx
// ends first, Append returns ctx.Err() and the event may or may not be
// stored. Safe for concurrent use.
func (st *Stream) Append(ctx context.Context, ev Event, opts ...AppendOption) (Position, error) {
	type result struct {
		pos Position
		err error
	}
	done := make(chan result, 1)
	err := st.AppendAsync(ctx, ev, func(p Position, err error) { done <- result{p, err} }, opts...)
	if err != nil {
		return Position{}, err
	}
	select {
	case r := <-done:
		return r.pos, r.err
	case <-ctx.Done():
		return Position{}, ctx.Err()
	}
}

// AppendAsync queues ev and returns; cb is called once with its position
// when it is durable, or with the error. Callbacks run in order of the
// appends on one goroutine of the store and must not block for long. It
// blocks only while the append queue is full (back-pressure) or until ctx
// ends. An invalid event is rejected here, and nothing is written.
func (st *Stream) AppendAsync(ctx context.Context, ev Event, cb func(Position, error), opts ...AppendOption) error {
	return st.appendAsync(ctx, ev, false, cb, opts...)
}

// appendAsync is AppendAsync; force skips the free-space admission (gap markers).
func (st *Stream) appendAsync(ctx context.Context, ev Event, force bool, cb func(Position, error), opts ...AppendOption) error {
	req := &appendReq{cb: cb}
	size, err := st.prepare(req, &ev, opts)
	if err != nil {
		return err
	}
	if req.belowFloor && !ev.Flags.Has(FlagGap) {
		return fmt.Errorf("%w: only gap markers are admitted below the free-space floor", ErrInvalidEvent)
	}
	if !force && !req.belowFloor {
		if err := st.s.admit(size); err != nil {
			return err
		}
	}
	return st.s.enqueue(ctx, req)
}

// prepare checks ev and encodes it into req; it returns the encoded size.
// Nothing of ev is kept: the caller may reuse its memory.
func (st *Stream) prepare(req *appendReq, ev *Event, opts []AppendOption) (int, error) {
	if ev.RoutingKey == "" || ev.Writer == "" {
		return 0, fmt.Errorf("%w: routing key and writer are required", ErrInvalidEvent)
	}
	for _, h := range ev.Headers {
		if h.Key == "" {
			return 0, fmt.Errorf("%w: empty header key", ErrInvalidEvent)
		}
	}
	size := encodedSize(ev)
	if size > st.s.opts.MaxEventBytes {
		return 0, fmt.Errorf("%w: %d bytes > %d", ErrEventTooLarge, size, st.s.opts.MaxEventBytes)
	}
	if err := st.s.Err(); err != nil {
		return 0, err
	}
	req.st, req.hash, req.size = st, KeyHash(ev.RoutingKey), len(ev.Payload)
	for _, o := range opts {
		o(req)
	}
	if len(ev.Payload) >= payloadThreshold {
		// To a payload file: the committer appends the reference.
		req.payload = slices.Clone(ev.Payload)
		req.rec = appendRecordHead(make([]byte, 0, size-len(ev.Payload)+32), recordVersionRef, ev)
	} else {
		req.rec = appendRecord(make([]byte, 0, size), ev)
	}
	return size, nil
}

// enqueue hands req to the committer, blocking while the queue is full.
func (s *Store) enqueue(ctx context.Context, req *appendReq) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	select {
	case s.queue <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetCommittedCut records the cut up to which sink has durably committed
// the stream. It must not move backwards.
func (st *Stream) SetCommittedCut(sink string, c StreamCut) error {
	if sink == "" {
		return fmt.Errorf("localstream: empty sink name")
	}
	topo := st.Topology()
	if err := topo.Validate(c); err != nil {
		return err
	}
	prev, ok, err := st.CommittedCut(sink)
	if err != nil {
		return err
	}
	if ok {
		le, err := topo.LessEq(prev, c)
		if err == nil && !le {
			return fmt.Errorf("%w: committed cut of %q would move back from %s to %s", ErrForeignCut, sink, prev, c)
		}
	}
	b, _ := c.MarshalBinary()
	if err := st.s.Err(); err != nil {
		return err
	}
	return st.s.update(func(txn *badger.Txn) error { return txn.Set(cutKey(st.name, sink), b) })
}

// CommittedCut returns the cut last recorded for sink.
func (st *Stream) CommittedCut(sink string) (StreamCut, bool, error) {
	var c StreamCut
	err := st.s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(cutKey(st.name, sink))
		if err != nil {
			return err
		}
		return it.Value(c.UnmarshalBinary)
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return StreamCut{}, false, nil
	}
	return c, err == nil, err
}

// CommittedCuts returns the committed cut of every sink.
func (st *Stream) CommittedCuts() (map[string]StreamCut, error) {
	out := map[string]StreamCut{}
	err := st.s.db.View(func(txn *badger.Txn) error {
		p := cutPrefix(st.name)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var c StreamCut
			if err := it.Item().Value(c.UnmarshalBinary); err != nil {
				return err
			}
			out[string(it.Item().Key()[len(p):])] = c
		}
		return nil
	})
	return out, err
}
