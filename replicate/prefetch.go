package replicate

import (
	"context"
	"errors"
	"maps"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/edge-agent/edge-agent/localstream"
)

// prefetcher reads the local stream ahead of the transaction being built,
// so that local reads overlap the wait for a commit's ack. It owns the
// reader. Records travel in batches of what the reader has at hand (one
// channel operation and one wake-up per batch, not per event); the
// buffer is bounded in records (channel of batches) and payload bytes
// (semaphore).
//
// The consumer side (head, pop, ch) belongs to one goroutine.
type prefetcher struct {
	ch     chan prefetchBatch
	free   chan []fetched // consumed batches' arrays, for reuse
	budget *semaphore.Weighted
	max    int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// cur is the batch being consumed: cur.recs[next:] are not consumed
	// yet. Consumer side only.
	cur  prefetchBatch
	next int
	// tail reports whether the last batch received ended where the
	// reader had nothing more at hand (ErrCaughtUp): an empty channel
	// after it is the stream's tail, after any other batch a reader that
	// is behind. Consumer side only.
	tail bool
}

// prefetchBatch is a run of records read ahead, and what it weighs
// against the byte budget.
type prefetchBatch struct {
	recs   []fetched
	weight int64
	// tail: the reader had nothing more at hand after this batch.
	tail bool
}

// fetched is one record read ahead, or the reader's error. cutAfter is
// the cut just after the record when the reader's cut changed beyond it
// (localstream.Reader.Reshapes); otherwise its Positions are nil and the
// cut after it is the previous record's with this record's position
// (see advanceCut).
type fetched struct {
	rec      localstream.Record
	cutAfter localstream.StreamCut
	err      error
}

// size is what a record weighs against the byte budget.
func (f fetched) size() int64 { return int64(len(f.rec.Payload)) + 256 }

// prefetchBatchRecords bounds a batch's records; a batch's bytes are
// bounded by a quarter of the budget (at most prefetchBatchBytes), so
// that several batches are in flight.
const (
	prefetchBatchRecords = 256
	prefetchBatchBytes   = 1 << 20
)

func newPrefetcher(ctx context.Context, rd *localstream.Reader, maxRecords int, maxBytes int64) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{ch: make(chan prefetchBatch, max(maxRecords/prefetchBatchRecords, 1)),
		free: make(chan []fetched, 4), budget: semaphore.NewWeighted(maxBytes), max: maxBytes, cancel: cancel}
	maxBatchBytes := min(prefetchBatchBytes, max(maxBytes/4, 1))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.ch)
		var reshapes uint64 // the reader's count at the last full cut sent
		rec, err := localstream.Record{}, error(nil)
		for {
			// Wait for one record, then take what the reader has at hand.
			if rec, err = rd.Next(ctx); err != nil {
				if ctx.Err() == nil {
					p.ch <- prefetchBatch{recs: []fetched{{err: err}}}
				}
				return
			}
			var b prefetchBatch
			select {
			case b.recs = <-p.free:
			default:
			}
			for {
				f := fetched{rec: rec}
				if n := rd.Reshapes(); n != reshapes {
					f.cutAfter, reshapes = rd.Cut(), n
				}
				b.recs = append(b.recs, f)
				b.weight += min(f.size(), p.max)
				if len(b.recs) >= prefetchBatchRecords || b.weight >= maxBatchBytes {
					break
				}
				if rec, err = rd.TryNext(); err != nil {
					if errors.Is(err, localstream.ErrCaughtUp) {
						b.tail = true
					} else {
						b.recs = append(b.recs, fetched{err: err})
					}
					break
				}
			}
			b.weight = min(b.weight, p.max)
			if err := p.budget.Acquire(ctx, b.weight); err != nil {
				return
			}
			select {
			case p.ch <- b:
			case <-ctx.Done():
				return
			}
			if err != nil && !errors.Is(err, localstream.ErrCaughtUp) {
				return // the error went out as the batch's last entry
			}
		}
	}()
	return p
}

// head returns the next record (or error) not consumed yet, without
// consuming it; false when no batch is at hand (receive one from ch and
// hand it to put).
func (p *prefetcher) head() (fetched, bool) {
	if p.next < len(p.cur.recs) {
		return p.cur.recs[p.next], true
	}
	return fetched{}, false
}

// put makes a batch received from ch the current one. The previous one
// must be consumed.
func (p *prefetcher) put(b prefetchBatch) { p.cur, p.next, p.tail = b, 0, b.tail }

// pop consumes the head record; the last of a batch returns the batch's
// bytes to the budget.
func (p *prefetcher) pop() {
	p.cur.recs[p.next] = fetched{}
	p.next++
	if p.next == len(p.cur.recs) {
		p.budget.Release(p.cur.weight)
		select {
		case p.free <- p.cur.recs[:0]:
		default:
		}
		p.cur, p.next = prefetchBatch{}, 0
	}
}

// close stops the read-ahead and waits for it.
func (p *prefetcher) close() {
	p.cancel()
	for range p.ch {
	}
	p.wg.Wait()
}

// advanceCut returns the cut after f, given cut, the cut just before it
// (after the previous record). owned reports whether cut's map may be
// changed in place: the first record derived from a cut the caller
// keeps copies it once.
func advanceCut(cut localstream.StreamCut, owned bool, f *fetched) (localstream.StreamCut, bool) {
	if f.cutAfter.Positions != nil {
		return f.cutAfter, true // a fresh copy, made for this record only
	}
	if !owned {
		cut = localstream.StreamCut{Stream: cut.Stream, Positions: maps.Clone(cut.Positions)}
	}
	cut.Positions[f.rec.Segment] = f.rec.Offset + 1
	return cut, true
}
