package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// TestReplicatesAndReadsBack: events appended while the replicator runs
// reach the centre within the commit interval, and the reader gives back
// exactly what was appended, with the committed watermarks.
func TestReplicatesAndReadsBack(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	nc := connect(t, srv.ClientURL())
	app := newAppender(st, 6)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	rp := startReplica(t, nc, st, "agent-a", ReplicatorConfig{OnCommit: func(c Committed, ingest []int64) {
		now := time.Now()
		for _, in := range ingest {
			lat = append(lat, now.Sub(time.Unix(0, in)))
		}
	}}, JetStreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := app.run(ctx, 2*time.Millisecond, 4); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitCaughtUp(t, nc, st, "agent-a", 10*time.Second)
	t.Logf("caught up %s after the last append; stats %+v", time.Since(start), rp.r.Stats())
	t0 := time.Now()
	if err := rp.close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("close %s", time.Since(t0))
	t0 = time.Now()
	ev, commits := verifyCentral(t, nc, st, "agent-a")
	t.Logf("verify %s", time.Since(t0))
	t.Logf("%d events in %d commits", ev, commits)
	if ev == 0 || commits < 5 {
		t.Fatalf("%d events in %d commits", ev, commits)
	}
}
