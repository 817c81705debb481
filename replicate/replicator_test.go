package replicate

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// replica runs one replicator in-process.
type replica struct {
	r    *Replicator
	done chan error
	stop context.CancelFunc
}

func startReplica(t testing.TB, nc *nats.Conn, st *localstream.Stream, agent string, cfg ReplicatorConfig, jsOpts JetStreamOptions) *replica {
	t.Helper()
	inst := newInstance()
	sink, err := NewJetStreamSink(nc, agent, inst, jsOpts)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Watermark == nil {
		if tr := trackerFor(st); tr != nil {
			cfg.Watermark = TrackerWatermark(tr, nil)
		}
	}
	r := NewReplicator(st, sink, inst, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	rp := &replica{r: r, done: make(chan error, 1), stop: cancel}
	go func() { rp.done <- r.Run(ctx) }()
	t.Cleanup(func() { sink.Close() }) // after the replicator stopped
	t.Cleanup(func() { rp.close() })
	return rp
}

func (rp *replica) close() error {
	rp.stop()
	select {
	case err := <-rp.done:
		rp.done <- err
		return err
	case <-time.After(10 * time.Second):
		return errors.New("replicator did not stop")
	}
}

// TestExactlyOnceThroughLinkFaults (b): a TCP proxy cuts the link
// mid-batch, delays commit acks past the commit timeout, and drops the
// link after the server committed but before the ack arrives, many times
// at random while events are appended (and the stream splits). Central
// ends with every local event exactly once.
func TestExactlyOnceThroughLinkFaults(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	srv := rigs.StartCentral(t, central.Config{})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	nc := connect(t, px.URL())
	app := newAppender(st, 5)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp := startReplica(t, nc, st, "agent-b", ReplicatorConfig{CommitTimeout: 300 * time.Millisecond}, JetStreamOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	appDone := make(chan error, 1)
	go func() { appDone <- app.run(ctx, 2*time.Millisecond, 4) }()

	n := testkit.Rounds(12)
	for i := range n {
		if i == n/2 {
			if _, err := st.Split(st.Topology().Open()[0].ID, 2); err != nil {
				t.Fatal(err)
			}
		}
		switch (i + int(seed%3)) % 3 { // every kind, in a seeded order
		case 0:
			before := px.midBatchCuts.Load()
			px.cutMidBatch.Store(true)
			testkit.WaitFor(t, 20*time.Second, "a mid-batch cut", func() bool { return px.midBatchCuts.Load() > before })
		case 1:
			before := px.droppedAcks.Load()
			px.dropAfterCommit.Store(true)
			testkit.WaitFor(t, 20*time.Second, "a commit ack dropped", func() bool { return px.droppedAcks.Load() > before })
		case 2:
			before := px.delayedAcks.Load()
			px.ackDelay.Store(int64(500 * time.Millisecond))
			testkit.WaitFor(t, 20*time.Second, "a commit ack delayed", func() bool { return px.delayedAcks.Load() > before })
			px.ackDelay.Store(0)
		}
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond) // a random pause between faults
	}
	cancel()
	if err := <-appDone; err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, nc, st, "agent-b", 30*time.Second)
	stats := rp.r.Stats()
	if err := rp.close(); err != nil {
		t.Fatal(err)
	}
	ev, commits := verifyCentral(t, connect(t, srv.ClientURL()), st, "agent-b")
	t.Logf("faults: %d mid-batch cuts, %d acks dropped after commit, %d acks delayed; replicator: %d retries, %d conflicts; central: %d events in %d commits",
		px.midBatchCuts.Load(), px.droppedAcks.Load(), px.delayedAcks.Load(), stats.Retries, stats.Conflicts, ev, commits)
	if stats.Retries == 0 || px.midBatchCuts.Load() == 0 || px.droppedAcks.Load() == 0 || px.delayedAcks.Load() == 0 {
		t.Fatal("a fault kind never hit the replicator")
	}
}
