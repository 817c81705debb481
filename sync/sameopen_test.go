package sync

import (
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
)

// TestSecondRunInTheSameOpenContinues: a replicator that stops and a new
// one (another run instance) on the same open store — as the agent's
// tests and the disk-full end-to-end test do when the centre comes back —
// continues the chain. Before, the new run took the first run's commits,
// beyond the tail the store had at its Open, for a lost local tail:
// it moved to a new epoch base and reported a loss that never happened.
func TestSecondRunInTheSameOpenContinues(t *testing.T) {
	srv := startCentral(t, central.Config{})
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
