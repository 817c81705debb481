package replicate

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// TestStateText: a state's JSON form is its name and reads back; an
// unknown name is refused.
func TestStateText(t *testing.T) {
	for s := StateStarting; s <= StateStopped; s++ {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := json.Unmarshal(b, &back); err != nil || back != s || string(b) != `"`+s.String()+`"` {
			t.Fatalf("%v: %s → %v, %v", s, b, back, err)
		}
	}
	var s State
	if err := json.Unmarshal([]byte(`"paused"`), &s); err == nil {
		t.Fatal("unknown state accepted")
	}
}

// TestStatsOfARebaseBeforeItsFirstCommit (issue 29 case 2): a store
// restored from a backup decides a rebase, and its link goes down before
// the first commit under the new base lands. Its stats show the base it
// sends under, the events waiting and the failing stream — not the
// chain's last record, which is another run's (the old base, a cut
// beyond this store's tail). They showed base 0 and no backlog, so
// Problem hid the stall; and TestRestoredBackupContinues read base 0
// whenever it looked between the centre storing that first commit and
// the replicator reading its ack.
func TestStatsOfARebaseBeforeItsFirstCommit(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p := newProducer()
	dir := filepath.Join(t.TempDir(), "store")
	n := startNode(t, nc, dir, "agent-rs", ReplicatorConfig{})
	p.add(t, n.st, 20)
	waitAllAt(t, nc, n, "agent-rs", p, 20*time.Second)
	n.stop(t)
	backup := filepath.Join(t.TempDir(), "backup")
	copyDir(t, dir, backup)
	n = startNode(t, nc, dir, "agent-rs", ReplicatorConfig{})
	p.add(t, n.st, 20)
	waitAllAt(t, nc, n, "agent-rs", p, 20*time.Second)
	n.stop(t)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, dir)

	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	// The link goes down as the rebase is decided (its loss is logged
	// then), before anything is sent under the new base.
	logger := slog.New(&logHook{prefix: "events lost", do: func() { px.SetDown(true) }})
	n = startNode(t, connect(t, px.URL()), dir, "agent-rs", ReplicatorConfig{Logger: logger})
	defer n.stop(t)
	p.add(t, n.st, 10)
	testkit.WaitFor(t, 20*time.Second, "the rebase decided and its first commit failed", func() bool {
		s := n.rp.r.Stats()
		return s.LostRanges == 1 && s.LastError != ""
	})
	s := n.rp.r.Stats()
	last := mustLast(t, nc, "agent-rs")
	if px.Cuts() == 0 || last.Record.Instance == n.rp.r.instance {
		t.Fatalf("the fault did not happen: %d link cuts, the chain's last record by %s (this run %s)", px.Cuts(), last.Record.Instance, n.rp.r.instance)
	}
	if s.EpochBase == last.Record.EpochBase || s.BacklogEvents != 10 || s.Problem(time.Now(), 0) == "" {
		t.Fatalf("a decided rebase, link down: epoch base %d (the chain's last %d), backlog %d (want the 10 waiting), problem %q (want the failing stream)",
			s.EpochBase, last.Record.EpochBase, s.BacklogEvents, s.Problem(time.Now(), 0))
	}
	px.SetDown(false)
	waitAllAt(t, nc, n, "agent-rs", p, 30*time.Second)
	rep := readLoss(t, nc, "agent-rs")
	checkAccounted(t, rep, p, 0)
	if got := rep.commits[len(rep.commits)-1].EpochBase; got != s.EpochBase || len(rep.lost) != 1 {
		t.Fatalf("the centre's base %d, shown %d; gaps %v (want one)", got, s.EpochBase, rep.lost)
	}
	t.Logf("shown before the first commit: base %d, backlog %d, %q", s.EpochBase, s.BacklogEvents, s.Problem(time.Now(), 0))
}

// logHook is a slog handler that calls do, once, at the first record
// whose message starts with prefix, and drops every record.
type logHook struct {
	prefix string
	do     func()
	once   sync.Once
}

func (h *logHook) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHook) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(h.do)
	}
	return nil
}

func (h *logHook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logHook) WithGroup(string) slog.Handler      { return h }
