package localstream

import (
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// inflightBatch is a group of appends written to Badger and waiting for
// their commit (and fsync) to complete.
type inflightBatch struct {
	reqs []*appendReq
	pos  []Position
	txns int        // commits this batch was split into
	done chan error // one value per commit
}

// commitLoop is the single writer: it takes appends from the queue in
// order, assigns offsets, and writes them in Badger commits bounded by
// events and bytes. The completer waits for each commit's fsync and calls
// back, so a batch's acks go out while the next one is gathered. (Badger
// itself holds the committer until each commit is written: the
// transaction writeBatch opens after its last commit waits, at its read
// timestamp, for that commit. Opening it lazily, so that the next batch's
// payload files are written during the sync, measured no different in
// BenchmarkDurableAppend with 256 KiB × 8 or 64 writers.)
func (s *Store) commitLoop() {
	defer s.wg.Done()
	defer close(s.inflight)
	for {
		select {
		case req, ok := <-s.queue:
			if !ok {
				return
			}
			batch, closed, c := s.gather(req)
			// The appends unacknowledged as this batch is sent (the batch,
			// those in flight, those queued) are the appenders expected in
			// the next batch: a writer waiting for its ack appends again.
			// Counted before the write, so that a commit completing at
			// once cannot hide its own batch.
			s.taken += uint64(len(batch))
			s.expect = int(s.taken-s.acked.Load()) + len(s.queue)
			s.gate.RLock()
			s.writeBatch(batch)
			s.gate.RUnlock()
			if c != nil {
				s.runCtrl(*c)
			}
			if closed {
				return
			}
		case c := <-s.ctrl:
			s.runCtrl(c)
		}
	}
}

// runCtrl runs a control function between two batches.
func (s *Store) runCtrl(c ctrlReq) {
	s.gate.RLock() // control functions write: scales, deletions
	err := c.fn()
	s.gate.RUnlock()
	c.reply <- err
}

// gather builds a batch starting with first. It takes what is queued and,
// while more appends are expected, holds the batch open for them — the
// group commit (Options.GroupCommitWindow) — until one of:
//
//   - the batch is full (MaxBatchEvents, MaxBatchBytes);
//   - it holds as many appends as were unacknowledged after the last
//     commit (writers waiting for an ack append again once acked);
//   - the window has passed since first was taken and no commit is in
//     flight (a commit sent while another syncs waits in Badger anyway);
//   - a control request arrives (returned in c, to run after the batch),
//     or the queue is closed (Close; closed is true).
//
// A lone writer, one append unacknowledged at a time, is never held.
func (s *Store) gather(first *appendReq) (batch []*appendReq, closed bool, c *ctrlReq) {
	bytes := 0
	full := func() bool { return len(batch) >= s.opts.MaxBatchEvents || bytes >= s.opts.MaxBatchBytes }
	take := func(r *appendReq) {
		batch = append(batch, r)
		bytes += len(r.rec) + len(r.payload)
		for _, g := range r.group { // AppendGroupAsync's: one batch
			batch = append(batch, g)
			bytes += len(g.rec) + len(g.payload)
		}
	}
	take(first)
	// What is queued already, without waiting.
	for queued := true; queued && !full(); {
		select {
		case r, ok := <-s.queue:
			if !ok {
				return batch, true, nil
			}
			take(r)
		default:
			queued = false
		}
	}
	if s.opts.GroupCommitWindow < 0 || full() || len(batch) >= s.expect {
		return batch, false, nil
	}
	s.holdTimer.Reset(s.opts.GroupCommitWindow)
	defer s.holdTimer.Stop()
	expired := false
	for !full() && len(batch) < s.expect && !(expired && s.acked.Load() == s.taken) {
		select {
		case r, ok := <-s.queue:
			if !ok {
				return batch, true, nil
			}
			take(r)
		case req := <-s.ctrl:
			return batch, false, &req
		case <-s.holdTimer.C:
			expired = true
		case <-s.completed:
		}
	}
	return batch, false, nil
}

// writeBatch assigns offsets and starts the Badger commits of one batch.
func (s *Store) writeBatch(batch []*appendReq) {
	b := &inflightBatch{reqs: batch, pos: make([]Position, len(batch)), done: make(chan error, 1+len(batch))}
	if s.watchDir() {
		err := s.Err()
		b.done <- err
		b.txns = 1
		s.inflight <- b
		return
	}
	if err := s.wal.ensure(walBytes(batch)); err != nil {
		// Nothing written: refused as below the floor (ErrDiskFull), or
		// a failed store.
		if errors.Is(err, ErrDiskFull) {
			s.diskFull.Add(uint64(len(batch)))
		}
		b.done <- err
		b.txns = 1
		s.inflight <- b
		return
	}
	// Scale before routing this batch: a decision taken at the end of a
	// rate window applies to the events that close it, and is in place
	// by the time they are acknowledged.
	now := s.opts.Now()
	for _, st := range s.Streams() {
		st.maybeAutoScale(now)
	}
	for i, r := range batch {
		sg := r.st.route(r.hash)
		b.pos[i] = Position{Segment: sg.ID, Offset: sg.assigned}
		sg.assigned++
		sg.winEvents++
		sg.winBytes += uint64(r.size)
	}
	fail := func(err error) {
		s.setSticky(err)
		b.done <- err
		b.txns = 1
		s.inflight <- b
	}
	// Large payloads go to payload files first (fsync'd before the
	// commit in DurabilityAlways); their index keys ride in the first commit.
	index, err := s.payloads.write(batch, b.pos, s.opts.Durability == DurabilityAlways)
	if err != nil {
		fail(err)
		return
	}
	txn := s.db.NewTransaction(true)
	txnBytes := 0
	bw := batchWriter{max: batchEntryMax(s.opts.ValueThreshold)} // record batches per segment and commit
	var jw journalWriter
	commit := func() error {
		if err := bw.each(txn.Set); err != nil {
			return err
		}
		if err := jw.each(s.journalSeq, txn.Set); err != nil {
			return err
		}
		s.journalSeq++
		b.txns++
		s.commits.Add(1)
		txn.CommitWith(func(err error) { b.done <- err })
		txn = s.db.NewTransaction(true)
		txnBytes = 0
		return nil
	}
	for k, v := range index {
		if err := txn.Set(metaKey(k), v); err != nil {
			txn.Discard()
			fail(err)
			return
		}
		txnBytes += len(k) + len(v)
	}
	for i, r := range batch {
		// Batches are bounded well below Badger's transaction limit (see
		// Options.MaxBatchBytes), so any error here is a failed write.
		if txnBytes > 0 && txnBytes+len(r.rec) > s.opts.MaxBatchBytes {
			if err := commit(); err != nil {
				txn.Discard()
				fail(err)
				return
			}
		}
		bw.add(r.st.name, b.pos[i].Segment, b.pos[i].Offset, r.rec)
		jw.add(r.journal)
		if err := setMetas(txn, r); err != nil {
			txn.Discard()
			fail(err)
			return
		}
		txnBytes += len(r.rec)
	}
	if err := commit(); err != nil {
		txn.Discard()
		fail(err)
		return
	}
	txn.Discard()
	s.inflight <- b
}

// walBytes bounds what a batch writes to the memtable's log: its records,
// metadata and journals, with each Badger entry's header, key version and
// checksum, and each transaction's end entry.
func walBytes(batch []*appendReq) int64 {
	n := int64(4096) // payload index keys, the transactions' end entries
	for _, r := range batch {
		n += int64(len(r.rec)) + 64
		for _, m := range r.metas {
			n += int64(len(m.key)+len(m.val)) + 64
		}
		for _, m := range r.journal {
			n += int64(len(m.key)+len(m.val)) + 64
		}
	}
	return n
}

// setMetas adds one append's metadata (WithMeta) to txn.
func setMetas(txn *badger.Txn, r *appendReq) error {
	for _, m := range r.metas {
		var err error
		if m.val == nil {
			err = txn.Delete(metaKey(m.key))
		} else {
			err = txn.Set(metaKey(m.key), m.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// route returns the open segment owning hash h. Committer goroutine only:
// only the committer changes the open list.
func (st *Stream) route(h float64) *segState {
	for _, sg := range st.open {
		if sg.Range.Contains(h) {
			return sg
		}
	}
	return st.open[len(st.open)-1] // h < 1 always lands above; defensive
}

// testHookCommitted, when set (tests), runs in the completer after a
// batch's commits are durable, before it is acknowledged.
var testHookCommitted func()

// completeLoop acknowledges batches in commit order once durable, and
// publishes the new durable lengths to readers. A batch is acknowledged
// only if the store's directory is still the one it opened after the
// batch became durable (watchDir).
func (s *Store) completeLoop() {
	defer s.wg.Done()
	for b := range s.inflight {
		var err error
		for range b.txns {
			if e := <-b.done; e != nil && err == nil {
				err = e
			}
		}
		if err == nil {
			if testHookCommitted != nil {
				testHookCommitted()
			}
			// Durable, but in the directory a restart reads? The
			// committer's check before the commit races a removal: the
			// batch may have gone into files without a name. Neither
			// acknowledged nor shown to readers then: the senders keep
			// it, and it goes to the centre only from the next store.
			if s.watchDir() {
				err = s.Err()
			}
		}
		s.acked.Add(uint64(len(b.reqs)))
		select {
		case s.completed <- struct{}{}: // wakes a held batch
		default:
		}
		if err != nil {
			if !errors.Is(err, ErrDiskFull) { // refused before writing
				s.setSticky(err)
			}
			for i, r := range b.reqs {
				r.done(nil, i, err)
			}
			continue
		}
		s.publish(b)
		for i, r := range b.reqs {
			r.done(b.pos, i, nil)
		}
	}
}

// publish makes a completed batch visible: durable lengths and counters.
func (s *Store) publish(b *inflightBatch) {
	var last *Stream
	for i, r := range b.reqs {
		st := r.st
		if st != last {
			if last != nil {
				last.broadcast()
				last.mu.Unlock()
			}
			st.mu.Lock()
			last = st
		}
		sg := st.segs[b.pos[i].Segment]
		if b.pos[i].Offset+1 > sg.Length {
			sg.Length = b.pos[i].Offset + 1
		}
		sg.Bytes += uint64(r.size)
		st.stats.Appended++
		st.stats.AppendedBytes += uint64(r.size)
	}
	if last != nil {
		last.broadcast()
		last.mu.Unlock()
	}
}
