package devices

import (
	"context"
	"errors"
	stdsync "sync"

	"github.com/edge-agent/edge-agent/localstream"
)

// replica is what the disk-full test needs of the central store: replicate
// a bounded number of events of a stream (committing the cut in the local
// store, as the sync package does), and read back everything it holds.
// memCentre implements it in memory; an end-to-end version implements it
// with the sync replicator and JetStream, reading the centre back.
type replica interface {
	// Replicate copies up to max events (all when max <= 0) of st after its
	// committed cut to the centre, then commits the new cut as sink "central".
	Replicate(ctx context.Context, st *localstream.Stream, max int) error
	// Records returns every event of stream held by the centre, in arrival order.
	Records(stream string) []localstream.Record
}

// memCentre is an in-memory central store.
type memCentre struct {
	mu      stdsync.Mutex
	records map[string][]localstream.Record
}

func newMemCentre() *memCentre { return &memCentre{records: map[string][]localstream.Record{}} }

func (c *memCentre) Replicate(ctx context.Context, st *localstream.Stream, max int) error {
	from, ok, err := st.CommittedCut("central")
	if err != nil {
		return err
	}
	if !ok {
		from = st.Topology().OpenAtZero()
	}
	tail := st.TailCut()
	r, err := st.NewReader(from, &tail)
	if err != nil {
		return err
	}
	defer r.Close()
	var batch []localstream.Record
	for max <= 0 || len(batch) < max {
		rec, err := r.TryNext()
		if errors.Is(err, localstream.ErrEndOfCut) || errors.Is(err, localstream.ErrCaughtUp) {
			break
		}
		if err != nil {
			return err
		}
		batch = append(batch, rec)
	}
	if len(batch) == 0 {
		return nil
	}
	// The transaction: data and cut together (here: centre first, then the
	// local committed cut; a crash in between is not part of this test).
	c.mu.Lock()
	c.records[st.Name()] = append(c.records[st.Name()], batch...)
	c.mu.Unlock()
	return st.SetCommittedCut("central", r.Cut())
}

func (c *memCentre) Records(stream string) []localstream.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]localstream.Record(nil), c.records[stream]...)
}
