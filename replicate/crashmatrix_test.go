package replicate

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// crashFault is one cell of the crash matrix.
type crashFault struct {
	name        string
	wipe        bool // delete the local store directory
	tail        int  // events to cut from each local segment's tail (0: none)
	centralTail bool // restore an older copy of the central's files
}

var crashMatrix = []crashFault{
	{name: "local-wiped", wipe: true},
	{name: "local-tail-lost", tail: 15},
	{name: "central-tail-lost", centralTail: true},
	{name: "both-tails-lost", tail: 15, centralTail: true},
}

// TestCrashMatrix (issue 11): local store wiped, local tail lost, central
// tail lost, and both, each while telemetry flows. Every acknowledged
// event ends at the centre exactly once or inside a reported gap (never
// both), no central position is reused, the committed watermarks stay
// monotone, and replication moves again within 5 s of the fault (the
// time from the restart after the fault to the first commit of events).
func TestCrashMatrix(t *testing.T) {
	for _, f := range crashMatrix {
		t.Run(f.name, func(t *testing.T) {
			d := runCrash(t, f, 400*time.Millisecond)
			if d > 5*time.Second {
				t.Fatalf("replication moved again only %s after the fault, want ≤ 5s", d)
			}
		})
	}
}

// runCrash runs one fault with telemetry flowing for about flowFor before
// and after it (as many events as the producer's pace makes in flowFor,
// however long they take), checks the outcome and returns how long
// replication took to move again.
func runCrash(t testing.TB, f crashFault, flowFor time.Duration) time.Duration {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	dir := filepath.Join(t.TempDir(), "store")
	agent := "agent-" + f.name
	p := newProducer()
	var mu sync.Mutex
	var commits []time.Time
	cfg := ReplicatorConfig{OnCommit: func(c Committed, _ []int64) {
		if c.Record.Events > 0 {
			mu.Lock()
			commits = append(commits, time.Now())
			mu.Unlock()
		}
	}}
	n := startNode(t, nc, dir, agent, cfg)
	var cur atomic.Pointer[localstream.Stream]
	cur.Store(n.st)
	ctx, cancel := context.WithCancel(context.Background())
	flowDone := make(chan struct{})
	const pace = 5 * time.Millisecond
	go func() { defer close(flowDone); p.flow(ctx, &cur, pace) }()
	defer func() { cancel(); <-flowDone }()
	flow := int(flowFor / pace)

	p.waitAcked(t, flow, "before the fault")
	backup := filepath.Join(t.TempDir(), "central-backup")
	if f.centralTail {
		testkit.WaitFor(t, 20*time.Second, "commits before the backup", func() bool { return n.rp.r.Stats().Events > 0 })
		srv.Shutdown()
		copyDir(t, srv.StoreDir(), backup)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		p.waitAcked(t, flow, "the centre moves past the backup")
		before := n.rp.r.Stats().Txns
		testkit.WaitFor(t, 20*time.Second, "commits after the backup", func() bool { return n.rp.r.Stats().Txns > before+2 })
	}
	p.waitAcked(t, flow, "before the fault")

	// The fault.
	restartNode := f.wipe || f.tail > 0
	if restartNode {
		cur.Store(nil)
		n.rp.close()
		n.store.Close()
	}
	if f.centralTail {
		srv.Shutdown()
		restoreCentral(t, srv.StoreDir(), backup)
	}
	cut := 0
	if f.wipe {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	if f.tail > 0 {
		if cut = truncateLocalTail(t, dir, testStream, f.tail); cut == 0 {
			t.Fatal("the fault did not happen: no local event deleted")
		}
	}
	if f.centralTail {
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
	}
	fault := time.Now()
	if restartNode {
		n = startNode(t, nc, dir, agent, cfg)
		cur.Store(n.st)
	}
	testkit.WaitFor(t, 30*time.Second, "replication moving after the fault", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(commits) > 0 && commits[len(commits)-1].After(fault)
	})
	mu.Lock()
	var resumed time.Duration
	for _, c := range commits {
		if c.After(fault) {
			resumed = c.Sub(fault)
			break
		}
	}
	mu.Unlock()
	p.waitAcked(t, flow, "after the fault")
	cur.Store(nil)
	cancel()
	<-flowDone
	waitAllAt(t, nc, n, agent, p, 30*time.Second)
	s := n.rp.r.Stats()
	n.stop(t)

	rep := readLoss(t, nc, agent)
	lost := checkAccounted(t, rep, p, len(p.acked))
	if (f.wipe || f.tail > 0) && len(rep.lost) == 0 {
		t.Fatalf("local data lost (%d events cut) and no gap reported", cut)
	}
	if f.centralTail && !restartNode && s.CentralRewinds == 0 {
		t.Fatal("the centre's lost tail was not noticed")
	}
	for _, g := range rep.lost {
		if len(g.From) == 0 {
			t.Fatalf("gap without an exact start: %s", g.String())
		}
	}
	t.Logf("%s: %d acknowledged, %d at the centre, %d lost inside %d reported gap(s); moving again %s after the fault",
		f.name, len(p.acked), len(rep.events), lost, len(rep.lost), resumed.Round(time.Millisecond))
	return resumed
}

// BenchmarkLostStateResume measures, per crash-matrix fault, how long
// replication takes to move again after it (with telemetry flowing for
// 2 s around the fault). Figures in BENCHMARKS.md, "Lost state".
func BenchmarkLostStateResume(b *testing.B) {
	for _, f := range crashMatrix {
		b.Run(f.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += runCrash(b, f, 2*time.Second)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "resume-ms")
		})
	}
}
