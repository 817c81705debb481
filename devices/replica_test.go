package devices

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// replica is what the disk-full test needs of the central store.
// memCentre implements it in memory; an end-to-end version implements it
// with the sync replicator (uplink limit, telemetry before video) and
// JetStream, converting the messages read back into Records (position from
// Edge-Segment/Edge-Offset, FlagGap from Edge-Gap).
type replica interface {
	// Run replicates every stream of store until ctx ends, committing cuts
	// in store as the sync does: telemetry and health keep up, video lags
	// (a slow uplink), so that disk pressure meets unreplicated video. It
	// returns nil when ctx ends.
	Run(ctx context.Context, store *localstream.Store) error
	// Drain replicates everything left (uplink unconstrained) and returns
	// once the centre holds every stream up to its tail.
	Drain(ctx context.Context, store *localstream.Store) error
	// Records returns every event of stream held by the centre, in arrival order.
	Records(stream string) []localstream.Record
}

// memCentre is an in-memory central store.
type memCentre struct {
	mu      sync.Mutex
	records map[string][]localstream.Record
}

func newMemCentre() *memCentre { return &memCentre{records: map[string][]localstream.Record{}} }

// Run replicates telemetry and health fully and video 2 events per round,
// every 20ms.
func (c *memCentre) Run(ctx context.Context, store *localstream.Store) error {
	for {
		for _, st := range store.Streams() {
			max := 0
			if st.Name() == "video" {
				max = 2
			}
			if err := c.Replicate(ctx, st, max); err != nil && ctx.Err() == nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Drain replicates every stream to its tail.
func (c *memCentre) Drain(ctx context.Context, store *localstream.Store) error {
	for _, st := range store.Streams() {
		if err := c.Replicate(ctx, st, 0); err != nil {
			return err
		}
	}
	return nil
}

// Replicate copies up to max events (all when max <= 0) of st after its
// committed cut to the centre, then commits the new cut as sink "central".
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
