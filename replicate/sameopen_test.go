package replicate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestSecondRunInTheSameOpenContinues: a replicator that stops and a new
// one (another run instance) on the same open store — as the agent's
// tests and the disk-full end-to-end test do when the centre comes back —
// continues the chain. Before, the new run took the first run's commits,
// beyond the tail the store had at its Open, for a lost local tail:
// it moved to a new epoch base and reported a loss that never happened.
func TestSecondRunInTheSameOpenContinues(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	n := startNode(t, nc, t.TempDir(), "agent-same", ReplicatorConfig{CommitInterval: 20 * time.Millisecond})
	p := newProducer()
	p.add(t, n.st, 30)
	waitAllAt(t, nc, n, "agent-same", p, 30*time.Second)
	n.rp.close()

	p.add(t, n.st, 30)
	n.rp = startReplica(t, nc, n.st, "agent-same", ReplicatorConfig{CommitInterval: 20 * time.Millisecond}, JetStreamOptions{})
	waitAllAt(t, nc, n, "agent-same", p, 30*time.Second)
	s := n.rp.r.Stats()
	if s.EpochBase != 0 || s.LostRanges != 0 || s.LastLoss != "" {
		t.Fatalf("second run in the same Open: epoch base %d, lost ranges %d (%s)", s.EpochBase, s.LostRanges, s.LastLoss)
	}
	rep := readLoss(t, nc, "agent-same")
	if len(rep.lost) != 0 || len(rep.events) != 60 {
		t.Fatalf("centre: %d events, losses %v", len(rep.events), rep.lost)
	}
	checkAccounted(t, rep, p, 0)
}

// TestSecondRunWhileAppending (issue 29 case 4): as above, but events
// are appended all the while, also between the runs. The second run
// continues from what the first committed: no false lost tail, no event
// twice at the centre.
func TestSecondRunWhileAppending(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	cfg := ReplicatorConfig{CommitInterval: 20 * time.Millisecond}
	n := startNode(t, nc, t.TempDir(), "agent-same2", cfg)
	defer n.stop(t)
	p := newProducer()
	var cur atomic.Pointer[localstream.Stream]
	cur.Store(n.st)
	ctx, cancel := context.WithCancel(context.Background())
	flowDone := make(chan struct{})
	go func() { defer close(flowDone); p.flow(ctx, &cur, 2*time.Millisecond) }()
	for run := range 3 {
		p.waitAcked(t, 150, "appends during the run")
		before := n.rp.r.Stats().Txns
		testkit.WaitFor(t, 20*time.Second, "commits of this run", func() bool { return n.rp.r.Stats().Txns > before+2 })
		n.rp.close()
		p.waitAcked(t, 25, "appends between the runs")
		n.rp = startReplica(t, nc, n.st, "agent-same2", cfg, JetStreamOptions{})
		t.Logf("run %d replaced", run)
	}
	p.waitAcked(t, 150, "appends during the last run")
	cancel()
	<-flowDone
	waitAllAt(t, nc, n, "agent-same2", p, 30*time.Second)
	s := n.rp.r.Stats()
	rep := readLoss(t, nc, "agent-same2") // fails on an event twice
	if s.EpochBase != 0 || s.LostRanges != 0 || len(rep.lost) != 0 {
		t.Fatalf("runs in the same Open: epoch base %d, lost ranges %d (%s), gaps at the centre %v", s.EpochBase, s.LostRanges, s.LastLoss, rep.lost)
	}
	checkAccounted(t, rep, p, 0)
	t.Logf("%d events at the centre over 4 runs of one Open", len(rep.events))
}
