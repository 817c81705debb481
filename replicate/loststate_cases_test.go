package replicate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/wire"
)

// TestLostLocalTail (issue 11 case 1): the local store loses its tail
// (events the centre committed, and events it never received) as a power
// cut in periodic durability does. The restarted store continues beyond
// the centre's cut, sends every new event (whose offsets it assigns
// again) exactly once at new positions, and reports the loss from the
// centre's cut, once; a second restart changes nothing.
func TestLostLocalTail(t *testing.T) {
	nc, dir, p, _ := replicatedThenStopped(t, "agent-lt")
	if del := truncateLocalTail(t, dir, testStream, 12); del == 0 {
		t.Fatal("the fault did not happen: nothing deleted")
	}
	n := startNode(t, nc, dir, "agent-lt", ReplicatorConfig{})
	p.add(t, n.st, 20) // offsets assigned again
	waitAllAt(t, nc, n, "agent-lt", p, 20*time.Second)
	s := n.rp.r.Stats()
	n.stop(t)
	// The next start must neither skip nor repeat anything.
	n = startNode(t, nc, dir, "agent-lt", ReplicatorConfig{})
	p.add(t, n.st, 5)
	waitAllAt(t, nc, n, "agent-lt", p, 20*time.Second)
	n.stop(t)
	rep := readLoss(t, nc, "agent-lt")
	lost := checkAccounted(t, rep, p, 30)
	if len(rep.lost) != 1 || rep.lost[0].Reason != wire.LossLocalTail || s.LostRanges != 1 || s.LastLoss == "" {
		t.Fatalf("loss reported %d times at the centre (%v), counter %d, status %q; want once", len(rep.lost), rep.lost, s.LostRanges, s.LastLoss)
	}
	if s.EpochBase == 0 {
		t.Fatal("new events sent at the old positions (epoch base 0)")
	}
	t.Logf("%d events at the centre, %d lost inside %s", len(rep.events), lost, rep.lost[0].String())
}

// replicatedThenStopped runs an agent on a new central: 30 events reach
// the centre, 10 more are captured after its replicator stopped, then
// the store is closed. It returns the connection, the store directory,
// the producer and the store identity.
func replicatedThenStopped(t *testing.T, agent string) (*nats.Conn, string, *producer, string) {
	t.Helper()
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	dir := t.TempDir()
	p := newProducer()
	n := startNode(t, nc, dir, agent, ReplicatorConfig{})
	p.add(t, n.st, 30)
	waitAllAt(t, nc, n, agent, p, 20*time.Second)
	n.rp.close()
	p.add(t, n.st, 10) // never replicated
	id := n.store.ID()
	if err := n.store.Close(); err != nil {
		t.Fatal(err)
	}
	return nc, dir, p, id
}

// TestWipedStoreTakesOver (issue 11 case 1, replaced disk): the data
// directory is deleted and the agent starts again with the same id on the
// same station. The new store (a new identity) takes the chain over at
// once, sends all of its events beyond every old position, and reports
// the old store's unsent events as lost.
func TestWipedStoreTakesOver(t *testing.T) {
	nc, dir, p, old := replicatedThenStopped(t, "agent-w")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := startNode(t, nc, dir, "agent-w", ReplicatorConfig{})
	if n.store.ID() == old {
		t.Fatal("a wiped directory kept its store identity")
	}
	p.add(t, n.st, 25)
	waitAllAt(t, nc, n, "agent-w", p, 30*time.Second)
	took := time.Since(start)
	s := n.rp.r.Stats()
	n.stop(t)
	rep := readLoss(t, nc, "agent-w")
	lost := checkAccounted(t, rep, p, 10)
	if len(rep.lost) != 1 || rep.lost[0].Reason != wire.LossStoreReplaced || rep.lost[0].Store != old || s.LostRanges != 1 {
		t.Fatalf("loss reports %v (counter %d), want one store-replaced of %s", rep.lost, s.LostRanges, old)
	}
	t.Logf("new store %s took over from %s in %s; %d events lost, inside %s", s.Store, old, took.Round(time.Millisecond), lost, rep.lost[0].String())
}

// TestCentralLostTail (issue 11 case 2): the central server is stopped
// and an older copy of its files restored. The agent sends again what it
// still retains and reports what retention deleted, with both ends
// exact; replication moves on at once instead of retrying forever.
func TestCentralLostTail(t *testing.T) {
	for _, truncated := range []bool{false, true} {
		name := "retained"
		if truncated {
			name = "truncated"
		}
		t.Run(name, func(t *testing.T) {
			srv := rigs.StartCentral(t, central.Config{})
			nc := connect(t, srv.ClientURL())
			p := newProducer()
			n := startNode(t, nc, t.TempDir(), "agent-ct", ReplicatorConfig{})
			defer n.stop(t)
			p.add(t, n.st, 20)
			waitAllAt(t, nc, n, "agent-ct", p, 20*time.Second)
			srv.Shutdown()
			backup := filepath.Join(t.TempDir(), "backup")
			copyDir(t, srv.StoreDir(), backup)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			p.add(t, n.st, 20)
			waitAllAt(t, nc, n, "agent-ct", p, 20*time.Second)
			if truncated {
				tail := n.st.TailCut()
				testkit.WaitFor(t, 10*time.Second, "the local record of the committed cut", func() bool {
					c, ok, _ := n.st.CommittedCut("central")
					return ok && c.Equal(tail)
				})
				c, _, _ := n.st.CommittedCut("central")
				if err := n.st.Truncate(c); err != nil {
					t.Fatal(err)
				}
				t.Logf("truncated at %s; head %s", c, n.st.HeadCut())
			}
			srv.Shutdown()
			restoreCentral(t, srv.StoreDir(), backup)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			p.add(t, n.st, 10)
			waitAllAt(t, nc, n, "agent-ct", p, 20*time.Second)
			took := time.Since(restarted)
			s := n.rp.r.Stats()
			rep := readLoss(t, nc, "agent-ct")
			lost := checkAccounted(t, rep, p, 20)
			if s.CentralRewinds == 0 {
				t.Fatal("the centre's lost tail was not noticed")
			}
			if truncated != (lost > 0) || truncated != (len(rep.lost) == 1) {
				t.Fatalf("truncated %v: %d events lost, gaps %v", truncated, lost, rep.lost)
			}
			if truncated && (lost != 20 || len(rep.lost[0].To) == 0) {
				t.Fatalf("lost %d (want the 20 retention deleted), gap %s (want an exact end)", lost, rep.lost[0].String())
			}
			t.Logf("moving again %s after the restored centre started; %d at the centre, %d lost", took.Round(time.Millisecond), len(rep.events), lost)
		})
	}
}

// TestTwinRefused (issue 11 case 4): a second store with the same agent
// id (a copied configuration) starts while the first is live. The
// newcomer is refused with one error naming both identities and keeps
// capturing; the incumbent is not disturbed.
func TestTwinRefused(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p, q := newProducer(), newProducer()
	a := startNode(t, nc, t.TempDir(), "agent-tw", ReplicatorConfig{})
	defer a.stop(t)
	p.add(t, a.st, 10)
	waitAllAt(t, nc, a, "agent-tw", p, 20*time.Second)
	// The twin captured before it reached the centre: more than a's, so
	// that a's cut fits its stream too.
	dirB := t.TempDir()
	sb0, stb := openStore(t, dirB)
	q.add(t, stb, 60)
	sb0.Close()
	b := startNode(t, nc, dirB, "agent-tw", twinStation(ReplicatorConfig{}))
	defer b.stop(t)
	// The incumbent goes on appending while the newcomer decides.
	testkit.Until(20*time.Second, func() bool {
		if b.rp.r.Stats().Stopped != "" {
			return true
		}
		p.add(t, a.st, 1)
		return false
	})
	sb, sa := b.rp.r.Stats(), a.rp.r.Stats()
	if sb.Stopped == "" || !strings.Contains(sb.Stopped, a.store.ID()) || !strings.Contains(sb.Stopped, b.store.ID()) {
		t.Fatalf("newcomer not refused with both identities: stopped %q, last error %q", sb.Stopped, sb.LastError)
	}
	if sa.Stopped != "" || sa.Adopted != 0 {
		t.Fatalf("incumbent disturbed: stopped %q, adopted %d", sa.Stopped, sa.Adopted)
	}
	q.add(t, b.st, 5) // the refused store keeps capturing
	p.add(t, a.st, 5)
	waitAllAt(t, nc, a, "agent-tw", p, 20*time.Second)
	rep := readLoss(t, nc, "agent-tw")
	checkAccounted(t, rep, p, 0)
	for pl := range rep.events {
		if _, ok := q.acked[pl]; ok {
			t.Fatalf("the twin's event %s reached the centre", pl)
		}
	}
	t.Logf("twin refused: %s", sb.Stopped)
}

// TestClonedStoreRefused (issue 11 case 4, cloned card): a copy of a
// live store's directory (same identity) started elsewhere is refused.
func TestClonedStoreRefused(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p := newProducer()
	dirA := t.TempDir()
	a := startNode(t, nc, dirA, "agent-cl", ReplicatorConfig{})
	p.add(t, a.st, 10)
	waitAllAt(t, nc, a, "agent-cl", p, 20*time.Second)
	a.stop(t)
	dirB := filepath.Join(t.TempDir(), "clone")
	copyDir(t, dirA, dirB)
	a = startNode(t, nc, dirA, "agent-cl", ReplicatorConfig{})
	defer a.stop(t)
	p.add(t, a.st, 5)
	waitAllAt(t, nc, a, "agent-cl", p, 20*time.Second)
	b := startNode(t, nc, dirB, "agent-cl", twinStation(ReplicatorConfig{}))
	defer b.stop(t)
	if a.store.ID() != b.store.ID() {
		t.Fatal("the copy has another identity")
	}
	testkit.WaitFor(t, 20*time.Second, "the clone refused", func() bool { return b.rp.r.Stats().Stopped != "" })
	if err := <-b.rp.done; !errors.Is(err, ErrTwin) {
		t.Fatalf("clone stopped with %v, want ErrTwin", err)
	}
	b.rp.done <- nil
	p.add(t, a.st, 5)
	waitAllAt(t, nc, a, "agent-cl", p, 20*time.Second)
	if s := a.rp.r.Stats(); s.Stopped != "" {
		t.Fatalf("original stopped: %s", s.Stopped)
	}
	checkAccounted(t, readLoss(t, nc, "agent-cl"), p, 0)
}
