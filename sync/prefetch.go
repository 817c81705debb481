package sync

import (
	"context"
	stdsync "sync"

	"golang.org/x/sync/semaphore"

	"github.com/edge-agent/edge-agent/localstream"
)

// prefetcher reads the local stream ahead of the transaction being built,
// so that local reads overlap the wait for a commit's ack. It owns the
// reader. Its buffer is bounded in records (channel) and payload bytes
// (semaphore).
type prefetcher struct {
	ch     chan fetched
	budget *semaphore.Weighted
	max    int64
	cancel context.CancelFunc
	wg     stdsync.WaitGroup
}

// fetched is one record read ahead, with the cut just after it, or the
// reader's error.
type fetched struct {
	rec      localstream.Record
	cutAfter localstream.StreamCut
	err      error
}

// size is what a record weighs against the byte budget.
func (f fetched) size() int64 { return int64(len(f.rec.Payload)) + 256 }

func newPrefetcher(ctx context.Context, rd *localstream.Reader, maxRecords int, maxBytes int64) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{ch: make(chan fetched, maxRecords), budget: semaphore.NewWeighted(maxBytes), max: maxBytes, cancel: cancel}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.ch)
		for {
			rec, err := rd.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.ch <- fetched{err: err}
				}
				return
			}
			f := fetched{rec: rec, cutAfter: rd.Cut()}
			if err := p.budget.Acquire(ctx, min(f.size(), p.max)); err != nil {
				return
			}
			select {
			case p.ch <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// release returns a consumed record's bytes to the budget.
func (p *prefetcher) release(f fetched) { p.budget.Release(min(f.size(), p.max)) }

// close stops the read-ahead and waits for it.
func (p *prefetcher) close() {
	p.cancel()
	for range p.ch {
	}
	p.wg.Wait()
}
