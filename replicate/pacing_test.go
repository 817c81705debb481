package replicate

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestCommitIntervalUnderBacklog: with a backlog always ready and every
// event paced by a slow uplink, transactions still close at the commit
// interval (small, frequent commits), and once idle the committed cut is
// recorded locally without waiting for another commit.
func TestCommitIntervalUnderBacklog(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	store := rigs.OpenStore(t, t.TempDir(), localstream.Options{})
	st, err := store.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, time.Minute)
	for i := range 300 {
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: fmt.Sprint("d", i%4), Writer: "w", Payload: make([]byte, 300)}); err != nil {
			t.Fatal(err)
		}
	}
	var commits, maxEvents atomic.Int64
	r := NewReplicator(st, newSink(t, nc, "pace"), newInstance(), ReplicatorConfig{
		Uplink: NewUplink(50_000), CommitInterval: 100 * time.Millisecond, // ~90 events/s
		OnCommit: func(c Committed, _ []int64) {
			commits.Add(1)
			if n := int64(c.Record.Events); n > maxEvents.Load() {
				maxEvents.Store(n)
			}
		},
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	tail := st.TailCut()
	var c localstream.StreamCut
	if !testkit.Until(30*time.Second, func() bool {
		var ok bool
		c, ok, _ = st.CommittedCut("central")
		return ok && c.Equal(tail)
	}) {
		t.Fatalf("local committed cut %v never reached the tail %v (%d commits)", c, tail, commits.Load())
	}
	cancel()
	<-done
	// 300 events at ~90/s take ~3 s: with 100 ms transactions that is
	// dozens of commits of a few events, not one of 300.
	if commits.Load() < 10 || maxEvents.Load() > 100 {
		t.Fatalf("%d commits, the largest with %d events: transactions did not close at the commit interval", commits.Load(), maxEvents.Load())
	}
}
