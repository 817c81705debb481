package replicate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/wire"
)

// Issue 29's cases tried in ways the first tests do not.

// TestTwinFirstDuringOutage: a station whose uplink is down from its
// start captures events; a twin (another station, same agent id) starts
// meanwhile and commits the chain's first record. When the first
// station's link returns it finds the twin's record: refused loudly
// (ErrTwin, naming both identities), never writing over the chain nor
// reporting a gap for it; the twin goes on. Who was "first" on the
// ground does not matter: the chain is the twin's until an operator acts.
func TestTwinFirstDuringOutage(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	px.SetDown(true)
	ncA, ncB := connect(t, px.URL()), connect(t, srv.ClientURL())
	p, q := newProducer(), newProducer()
	a := startNode(t, ncA, t.TempDir(), "agent-first", ReplicatorConfig{})
	defer a.stop(t)
	p.add(t, a.st, 20)

	b := startNode(t, ncB, t.TempDir(), "agent-first", twinStation(ReplicatorConfig{}))
	defer b.stop(t)
	q.add(t, b.st, 30)
	waitAllAt(t, ncB, b, "agent-first", q, 20*time.Second)
	px.SetDown(false)
	testkit.Until(20*time.Second, func() bool { return a.rp.r.Stats().Stopped != "" })
	sa := a.rp.r.Stats()
	if sa.Stopped == "" || !strings.Contains(sa.Stopped, a.store.ID()) || !strings.Contains(sa.Stopped, b.store.ID()) {
		t.Fatalf("the late station was not refused naming both identities: stopped %q, txns %d, error %q", sa.Stopped, sa.Txns, sa.LastError)
	}
	if err := <-a.rp.done; !errors.Is(err, ErrTwin) {
		t.Fatalf("late station stopped with %v, want ErrTwin", err)
	}
	a.rp.done <- nil
	q.add(t, b.st, 10)
	waitAllAt(t, ncB, b, "agent-first", q, 20*time.Second)
	if sb := b.rp.r.Stats(); sb.Stopped != "" || sb.LostRanges != 0 {
		t.Fatalf("the chain's writer disturbed: stopped %q, lost ranges %d", sb.Stopped, sb.LostRanges)
	}
	rep := readLoss(t, ncB, "agent-first")
	checkAccounted(t, rep, q, 0)
	if len(rep.lost) != 0 {
		t.Fatalf("gaps reported: %v", rep.lost)
	}
	for pl := range rep.events {
		if _, ok := p.acked[pl]; ok {
			t.Fatalf("the refused station's event %s reached the centre", pl)
		}
	}
	t.Logf("twin committed first; %d events at the centre; the late station refused: %s", len(rep.events), sa.Stopped)
}

// TestBackupRestoredTwice: the same backup restored twice, each time
// after the restored store ran on and committed more. Each restore
// continues as its own past under a new epoch base beyond every one the
// chain has used (positions never reused), with one gap of its own;
// every acknowledged event is at the centre once or inside a reported gap.
func TestBackupRestoredTwice(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p := newProducer()
	dir := filepath.Join(t.TempDir(), "store")
	n := startNode(t, nc, dir, "agent-bk2", ReplicatorConfig{})
	p.add(t, n.st, 20)
	waitAllAt(t, nc, n, "agent-bk2", p, 20*time.Second)
	n.stop(t)
	backup := filepath.Join(t.TempDir(), "backup")
	copyDir(t, dir, backup)

	var bases []uint32
	for i := range 3 {
		n = startNode(t, nc, dir, "agent-bk2", ReplicatorConfig{})
		p.add(t, n.st, 20)
		// A restored store's positions are below the chain's cut until
		// its first commit under the new base: waitAllAt needs one.
		testkit.Until(20*time.Second, func() bool { return n.rp.r.Stats().Txns > 0 })
		waitAllAt(t, nc, n, "agent-bk2", p, 20*time.Second)
		s := n.rp.r.Stats()
		if s.Stopped != "" {
			t.Fatalf("run %d after %d restores: stopped %q", i+1, i, s.Stopped)
		}
		bases = append(bases, s.EpochBase)
		t.Logf("run %d: base %d, lost ranges %d, txns %d, cut %s", i, s.EpochBase, s.LostRanges, s.Txns, s.CommittedCut)
		n.rp.close()
		p.add(t, n.st, 5) // not sent by this run: lost with a restore, sent by the next run otherwise
		n.store.Close()
		if i == 2 {
			break
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		copyDir(t, backup, dir)
	}
	if !(bases[0] < bases[1] && bases[1] < bases[2]) {
		t.Fatalf("epoch bases %v: each restore must take a base beyond every earlier one", bases)
	}
	n = startNode(t, nc, dir, "agent-bk2", ReplicatorConfig{})
	defer n.stop(t)
	waitAllAt(t, nc, n, "agent-bk2", p, 20*time.Second)
	rep := readLoss(t, nc, "agent-bk2")
	lost := checkAccounted(t, rep, p, 10)
	if len(rep.lost) != 2 || lost != 10 {
		t.Fatalf("%d events lost in %d gaps (%v); want the 5 unsent of each restored-over run, in one gap per restore", lost, len(rep.lost), rep.lost)
	}
	for _, g := range rep.lost {
		if g.Reason != wire.LossLocalTail {
			t.Fatalf("gap %s: want %s", g.String(), wire.LossLocalTail)
		}
	}
	t.Logf("backup restored twice: bases %v, %d events at the centre, %d lost inside %d gaps", bases, len(rep.events), lost, len(rep.lost))
}

// TestUpgradedStoreRestartedBeforeFirstCommit (issue 37 case 6): a store
// upgraded in place (its chain's last record was written before store
// identities, by this store's old version) is restarted after its first
// read of the centre and before its first commit — idle, and with events
// flowing while its uplink is down. It is still the store that wrote
// that record: it continues the chain with every event and no gap,
// never refused as a twin of itself.
//
// Failed before: "restarted upgraded store (idle): stopped \"replicate:
// fenced: another agent uses this agent id: another live store writes
// this agent's chain: ...\"; 0 of 20
// events at the centre".
func TestUpgradedStoreRestartedBeforeFirstCommit(t *testing.T) {
	for _, flowing := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "events flowing"}[flowing]
		t.Run(name, func(t *testing.T) {
			srv := rigs.StartCentral(t, central.Config{})
			px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
			nc, ncP := connect(t, srv.ClientURL()), connect(t, px.URL())
			agent := "agent-upr"
			p := newProducer()
			dir := t.TempDir()
			s0, st := openStore(t, dir)
			p.add(t, st, 40)
			cut := st.TailCut()
			if err := st.SetCommittedCut("central", cut); err != nil {
				t.Fatal(err)
			}
			s0.Close()
			preIdentityChain(t, srv.ClientURL(), agent, cut)
			p = newProducer() // the 40 are the old version's, committed

			n := startNode(t, ncP, dir, agent, ReplicatorConfig{})
			testkit.WaitFor(t, 20*time.Second, "the first read of the centre", func() bool { return n.rp.r.Stats().LastSeq > 0 })
			if flowing {
				px.SetDown(true)
				p.add(t, n.st, 20)
				testkit.WaitFor(t, 20*time.Second, "a send tried on the cut link", func() bool { return n.rp.r.Stats().LastError != "" })
			}
			if s := n.rp.r.Stats(); s.Txns != 0 || s.Stopped != "" {
				t.Fatalf("the fault did not happen: the first run committed %d txns (stopped %q)", s.Txns, s.Stopped)
			}
			n.stop(t)
			px.SetDown(false)

			n = startNode(t, nc, dir, agent, ReplicatorConfig{})
			defer n.stop(t)
			if !flowing {
				p.add(t, n.st, 20)
			}
			testkit.WaitFor(t, 20*time.Second, "the restarted store refused or caught up", func() bool {
				c, ok := n.rp.r.localCut(mustLast(t, nc, agent))
				return n.rp.r.Stats().Stopped != "" || ok && c.Equal(n.st.TailCut())
			})
			s := n.rp.r.Stats()
			rep := readLoss(t, nc, agent)
			if s.Stopped != "" || len(rep.events) != 20 || len(rep.lost) != 0 || s.EpochBase != 0 {
				t.Fatalf("restarted upgraded store (%s): stopped %q; %d of 20 events at the centre, gaps %v, base %d", name, s.Stopped, len(rep.events), rep.lost, s.EpochBase)
			}
			checkAccounted(t, rep, p, 0)
		})
	}
}
