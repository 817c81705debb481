package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// Identity (issue 29): who may continue an agent's chain, decided by what
// the stores and stations are, never by how long the incumbent was silent.

// TestIncumbentOutageNotTakenOver (issue 29 case 1): the incumbent's
// uplink is down for longer than a twin's old watch window while a twin
// (another station, same agent id) starts. The twin is refused at once,
// naming both identities; the incumbent is never fenced, and when its
// link returns every event it captured reaches the centre, once, with no
// gap.
func TestIncumbentOutageNotTakenOver(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	ncA, ncB := connect(t, px.URL()), connect(t, srv.ClientURL())
	p, q := newProducer(), newProducer()
	a := startNode(t, ncA, t.TempDir(), "agent-out", ReplicatorConfig{})
	defer a.stop(t)
	p.add(t, a.st, 10)
	waitAllAt(t, ncB, a, "agent-out", p, 20*time.Second)

	px.SetDown(true)
	var cur atomic.Pointer[localstream.Stream]
	cur.Store(a.st)
	ctx, cancel := context.WithCancel(context.Background())
	flowDone := make(chan struct{})
	go func() { defer close(flowDone); p.flow(ctx, &cur, 20*time.Millisecond) }()

	dirB := t.TempDir()
	sb0, stb := openStore(t, dirB)
	q.add(t, stb, 60)
	sb0.Close()
	b := startNode(t, ncB, dirB, "agent-out", twinStation(ReplicatorConfig{}))
	defer b.stop(t)
	// Longer than any watch of the chain: 5 s of silence (the fault
	// itself, not a wait).
	time.Sleep(5 * time.Second)
	before := a.rp.r.Stats().Txns
	px.SetDown(false)
	testkit.WaitFor(t, 30*time.Second, "the incumbent's commits after its outage", func() bool { return a.rp.r.Stats().Txns > before })
	cancel()
	<-flowDone
	if px.Cuts() == 0 {
		t.Fatal("the fault did not happen: the incumbent's link was never cut")
	}
	sb := b.rp.r.Stats()
	if sb.Stopped == "" || !strings.Contains(sb.Stopped, a.store.ID()) || !strings.Contains(sb.Stopped, b.store.ID()) {
		t.Fatalf("the twin was not refused naming both identities: stopped %q, committed %d txns, last error %q", sb.Stopped, sb.Txns, sb.LastError)
	}
	if err := <-b.rp.done; !errors.Is(err, ErrTwin) {
		t.Fatalf("twin stopped with %v, want ErrTwin", err)
	}
	b.rp.done <- nil
	waitAllAt(t, ncB, a, "agent-out", p, 30*time.Second)
	if sa := a.rp.r.Stats(); sa.Stopped != "" || sa.LostRanges != 0 {
		t.Fatalf("incumbent disturbed by its outage: stopped %q, lost ranges %d", sa.Stopped, sa.LostRanges)
	}
	rep := readLoss(t, ncB, "agent-out")
	checkAccounted(t, rep, p, 0)
	if len(rep.lost) != 0 {
		t.Fatalf("gaps reported for a live incumbent: %v", rep.lost)
	}
	for pl := range rep.events {
		if _, ok := q.acked[pl]; ok {
			t.Fatalf("the twin's event %s reached the centre", pl)
		}
	}
	t.Logf("link down 5 s, %d events at the centre; twin refused: %s", len(rep.events), sb.Stopped)
}

// TestRestoredBackupContinues (issue 29 case 2): the store is restored
// from a backup taken before its later runs (which committed more and
// captured 5 events never sent). The restored store continues as its own
// past under a new epoch base, with one gap marker from the chain's cut
// (the later runs' unsent events inside it), instead of stalling as a
// live clone.
func TestRestoredBackupContinues(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p := newProducer()
	dir := filepath.Join(t.TempDir(), "store")
	n := startNode(t, nc, dir, "agent-bk", ReplicatorConfig{})
	p.add(t, n.st, 20)
	waitAllAt(t, nc, n, "agent-bk", p, 20*time.Second)
	n.stop(t)
	backup := filepath.Join(t.TempDir(), "backup")
	copyDir(t, dir, backup)

	n = startNode(t, nc, dir, "agent-bk", ReplicatorConfig{})
	p.add(t, n.st, 20)
	waitAllAt(t, nc, n, "agent-bk", p, 20*time.Second)
	n.rp.close()
	p.add(t, n.st, 5) // never sent: lost with the disk
	n.store.Close()

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, dir)
	n = startNode(t, nc, dir, "agent-bk", ReplicatorConfig{})
	defer n.stop(t)
	p.add(t, n.st, 10)
	waitAllAt(t, nc, n, "agent-bk", p, 20*time.Second)
	s := n.rp.r.Stats()
	rep := readLoss(t, nc, "agent-bk")
	lost := checkAccounted(t, rep, p, 5)
	if s.Stopped != "" || s.EpochBase == 0 || len(rep.lost) != 1 || rep.lost[0].Reason != wire.LossLocalTail || s.LostRanges != 1 {
		t.Fatalf("restored backup: stopped %q, epoch base %d, gaps %v (counter %d); want a new base and one local-tail-lost gap", s.Stopped, s.EpochBase, rep.lost, s.LostRanges)
	}
	if c := rep.commits[len(rep.commits)-1]; c.EpochBase != s.EpochBase {
		t.Fatalf("the centre's last commit is under base %d, the replicator shows %d", c.EpochBase, s.EpochBase)
	}
	if lost != 5 {
		t.Fatalf("%d events lost, want the 5 the later run never sent", lost)
	}
	t.Logf("restored backup continued under base %d; %d events at the centre, %d lost inside %s", s.EpochBase, len(rep.events), lost, rep.lost[0].String())
}

// preIdentityChain makes the central stream and puts a pre-identity
// commit record with cut at the end of agent's chain.
func preIdentityChain(t *testing.T, srvURL, agent string, cut localstream.StreamCut) {
	t.Helper()
	nc := connect(t, srvURL)
	sink := newSink(t, nc, agent)
	if err := sink.Prepare(testCtx(t, 10*time.Second), testStream); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rec := wire.CommitRecord{Agent: agent, Stream: testStream, Txn: 1, Instance: "old-version-run",
		Cut: cut.Map(), CutText: cut.String(), CommittedAtNs: time.Now().UnixNano()}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"store"`) {
		t.Fatalf("not a pre-identity record: %s", b)
	}
	if _, err := js.Publish(testCtx(t, 10*time.Second), wire.CutSubject(testStream, agent), b); err != nil {
		t.Fatal(err)
	}
}

// TestPreIdentityRecordIsAnotherStores (issue 29 case 3): the chain ends
// with a record written before store identities (no "store") by the
// station's old disk; a reflashed station's new store captured 60 events
// offline. The record is not taken for the new store's own: none of its
// 60 events is skipped silently. Unknown to be this station's, it is
// refused until the operator's --takeover, then every event arrives and
// the old store's unsent events are a reported gap.
func TestPreIdentityRecordIsAnotherStores(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p := newProducer()
	dir := t.TempDir()
	s0, st := openStore(t, dir)
	p.add(t, st, 40)
	cut := st.TailCut()
	p.add(t, st, 20)
	s0.Close()
	preIdentityChain(t, srv.ClientURL(), "agent-pre", cut)

	n := startNode(t, nc, dir, "agent-pre", ReplicatorConfig{})
	testkit.WaitFor(t, 20*time.Second, "the new store refused or caught up", func() bool {
		s := n.rp.r.Stats()
		c, ok := n.rp.r.localCut(mustLast(t, nc, "agent-pre"))
		return s.Stopped != "" || ok && c.Equal(n.st.TailCut())
	})
	// The refusal claims no live store it cannot know of (issue 37 case 6).
	if s := n.rp.r.Stats(); s.Stopped == "" || !strings.Contains(s.Stopped, "before store identities") || strings.Contains(s.Stopped, "another live store") {
		rep := readLoss(t, nc, "agent-pre")
		t.Fatalf("a pre-identity record taken for the new store's own: stopped %q; %d of 60 events at the centre, gaps %v", s.Stopped, len(rep.events), rep.lost)
	}
	n.stop(t)
	n = startNode(t, nc, dir, "agent-pre", ReplicatorConfig{Takeover: true})
	defer n.stop(t)
	waitAllAt(t, nc, n, "agent-pre", p, 20*time.Second)
	rep := readLoss(t, nc, "agent-pre")
	checkAccounted(t, rep, p, 0)
	if len(rep.events) != 60 || len(rep.lost) != 1 || rep.lost[0].Reason != wire.LossStoreReplaced {
		t.Fatalf("after --takeover: %d events at the centre (want 60), gaps %v (want one store-replaced)", len(rep.events), rep.lost)
	}
}

// TestPreIdentityRecordOfAnUpgradedStore (issue 29 case 3, the other
// side): a store that existed before identities (its local record of the
// committed cut was written by the old version, no recorder noted)
// continues the chain its old version wrote, with no gap.
func TestPreIdentityRecordOfAnUpgradedStore(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p := newProducer()
	dir := t.TempDir()
	s0, st := openStore(t, dir)
	p.add(t, st, 40)
	cut := st.TailCut()
	if err := st.SetCommittedCut("central", cut); err != nil {
		t.Fatal(err)
	}
	p.add(t, st, 20)
	s0.Close()
	preIdentityChain(t, srv.ClientURL(), "agent-up", cut)

	n := startNode(t, nc, dir, "agent-up", ReplicatorConfig{})
	defer n.stop(t)
	testkit.WaitFor(t, 20*time.Second, "the upgraded store caught up", func() bool {
		c, ok := n.rp.r.localCut(mustLast(t, nc, "agent-up"))
		return n.rp.r.Stats().Stopped != "" || ok && c.Equal(n.st.TailCut())
	})
	s := n.rp.r.Stats()
	rep := readLoss(t, nc, "agent-up")
	if s.Stopped != "" || len(rep.events) != 20 || len(rep.lost) != 0 || s.EpochBase != 0 {
		t.Fatalf("upgraded store: stopped %q, %d events at the centre (want the 20 after its record), gaps %v, base %d", s.Stopped, len(rep.events), rep.lost, s.EpochBase)
	}
}

// mustLast is agent's last commit at the centre (zero while none).
func mustLast(t *testing.T, nc *nats.Conn, agent string) Committed {
	t.Helper()
	c, _ := lastCommitted(context.Background(), nc, testStream, agent, 2*time.Second)
	return c
}

// testStation is the station of the tests' nodes (startNode); a twin's
// is another (twinStation).
const testStation = "station-test"

// twinStation is cfg on another station than the tests' own.
func twinStation(cfg ReplicatorConfig) ReplicatorConfig {
	cfg.Station = "station-twin"
	return cfg
}
