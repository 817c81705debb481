package devices

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
)

// TestDiskFullEndToEnd is TestDiskFull with the real replication: the sync
// replicators over a capped uplink (telemetry before health before video)
// into an embedded JetStream, read back with the central reader. It proves
// that the gap markers reach the centre.
func TestDiskFullEndToEnd(t *testing.T) { runDiskFull(t, newJSCentre(t, 1<<20)) }

// jsCentre is a replica on an embedded JetStream server.
type jsCentre struct {
	t        *testing.T
	nc       *nats.Conn
	sink     *replicate.JetStreamSink
	instance string
	uplink   int64 // bytes/s while running
}

func newJSCentre(t *testing.T, uplink int64) *jsCentre {
	t.Helper()
	srv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: []string{srv.ClientURL()}, IgnoreDiscoveredServers: true,
		RequestTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := make([]byte, 8)
	rand.Read(b)
	instance := hex.EncodeToString(b)
	sink, err := replicate.NewJetStreamSink(nc, "gs-1", instance, replicate.JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	return &jsCentre{t: t, nc: nc, sink: sink, instance: instance, uplink: uplink}
}

// replicate runs one replicator per stream until ctx ends or done says stop.
func (c *jsCentre) replicate(ctx context.Context, store *localstream.Store, uplink *replicate.Uplink) error {
	var wg sync.WaitGroup
	errs := make([]error, len(store.Streams()))
	var reps []*replicate.Replicator
	for i, st := range store.Streams() {
		r := replicate.NewReplicator(st, c.sink, c.instance, replicate.ReplicatorConfig{Uplink: uplink,
			CommitInterval: 20 * time.Millisecond, Logger: quietLogger()})
		reps = append(reps, r)
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Run(ctx) }()
	}
	wg.Wait()
	for _, r := range reps {
		s := r.Stats()
		c.t.Logf("replicator %+v", s)
		// Shedding is reported by gap markers in the stream; the store
		// itself lost nothing, so no loss of positions may be reported.
		if s.LostRanges != 0 || s.EpochBase != 0 {
			c.t.Errorf("%s: the store lost nothing, yet the replicator reported a loss (epoch base %d): %s", s.Stream, s.EpochBase, s.LastLoss)
		}
	}
	return errors.Join(errs...)
}

func (c *jsCentre) Run(ctx context.Context, store *localstream.Store) error {
	return c.replicate(ctx, store, replicate.NewUplink(c.uplink))
}

// Drain replicates without a cap until every stream's committed cut is its tail.
func (c *jsCentre) Drain(ctx context.Context, store *localstream.Store) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- c.replicate(rctx, store, nil) }()
	defer func() { stop(); <-done }()
	for n := 0; ; n++ {
		caughtUp := true
		for _, st := range store.Streams() {
			// The centre's last commit (the local record of it may lag one
			// transaction behind).
			last, err := c.sink.LastCommitted(ctx, st.Name())
			if err != nil { // the replicator may not have created the central stream yet
				c.t.Logf("drain: %s: %v", st.Name(), err)
				caughtUp = false
				continue
			}
			ok := last.Seq > 0
			var cc localstream.StreamCut
			if ok {
				if cc, err = last.Record.StreamCut(); err != nil {
					return err
				}
				// Central segment ids are the local ones shifted by the
				// record's epoch base (a store that resumed after a loss).
				local := map[localstream.SegmentID]uint64{}
				for id, off := range cc.Positions {
					local[localstream.NewSegmentID(id.Epoch()-last.Record.EpochBase, id.Number())] = off
				}
				cc.Positions = local
			}
			tail := st.TailCut()
			le, _ := st.Topology().LessEq(tail, cc)
			caughtUp = caughtUp && ok && le
			if n%100 == 99 {
				c.t.Logf("drain: %s: centre at %s (%v), local tail %s", st.Name(), cc, ok, tail)
			}
		}
		if caughtUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: %w", ctx.Err())
		case err := <-done:
			return fmt.Errorf("drain: replicators stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *jsCentre) Records(stream string) []localstream.Record {
	items, err := centralread.ReadAll(context.Background(), c.nc, stream, centralread.ReadOptions{Agent: "gs-1"})
	if err != nil {
		c.t.Fatalf("read central %s: %v", stream, err)
	}
	var out []localstream.Record
	for _, it := range items {
		if it.Kind == centralread.ItemEvent {
			out = append(out, it.Event.Record)
		}
	}
	return out
}
