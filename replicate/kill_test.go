package replicate

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// TestMain turns the test binary into the agent subprocess of the SIGKILL
// tests (child role "agent").
func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"agent": childAgent})
}

// childAgent appends and replicates until killed. It prints "acked <seq>"
// after each commit ack.
func childAgent() int {
	dir, url, agent := os.Getenv("EDGE_SYNC_DIR"), os.Getenv("EDGE_SYNC_URL"), os.Getenv("EDGE_SYNC_AGENT")
	store, st, err := openStoreErr(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer store.Close()
	nc, err := Connect(ConnConfig{URLs: []string{url}, IgnoreDiscoveredServers: true}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	inst := fmt.Sprintf("child-%d", os.Getpid())
	layout, _ := strconv.Atoi(os.Getenv("EDGE_SYNC_LAYOUT"))
	sink, err := NewJetStreamSink(nc, agent, inst, JetStreamOptions{Layout: layout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	r := NewReplicator(st, sink, inst, ReplicatorConfig{
		Station:   os.Getenv("EDGE_SYNC_STATION"),
		Watermark: TrackerWatermark(trackerFor(st), nil),
		OnCommit: func(c Committed, _ []int64) {
			mu.Lock()
			fmt.Fprintf(out, "acked %d\n", c.Seq)
			out.Flush()
			mu.Unlock()
		},
	})
	ctx := context.Background()
	if tag := os.Getenv("EDGE_SYNC_EVENTS"); tag != "" {
		// Events with unique payloads, each printed once acknowledged.
		go produceLogged(st, tag, &mu, out)
		if err := r.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	app := newAppender(st, 6)
	if os.Getenv("EDGE_SYNC_WARM") == "1" {
		if err := app.warm(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	go app.run(ctx, 2*time.Millisecond, 3)
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestExactlyOnceAcrossSIGKILL (a): the agent process is killed with
// SIGKILL at random points of its transaction cycle, many rounds, while it
// appends. Proof that kills hit open transactions: the server reports
// abandoned batches; kills between commit and ack are counted when the
// centre holds a commit the dead child never saw acked. Rounds alternate
// the central layouts 1 and 2, so one agent's commit chain crosses from
// one layout to the other and back, and the reader reads both.
func TestExactlyOnceAcrossSIGKILL(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	srv := rigs.StartCentral(t, central.Config{MaxBatchTimeout: 300 * time.Millisecond})
	nc := connect(t, srv.ClientURL())
	var abandoned atomic.Int64
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", func(*natsMsg) { abandoned.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	dir := t.TempDir()
	n := testkit.Rounds(20)
	var landedUnacked int
	for i := range n {
		cmd := testkit.ChildCommand("agent", "EDGE_SYNC_DIR="+dir, "EDGE_SYNC_URL="+srv.ClientURL(), "EDGE_SYNC_AGENT=agent-k",
			"EDGE_SYNC_LAYOUT="+strconv.Itoa(1+i%2))
		if i == 0 {
			cmd.Env = append(cmd.Env, "EDGE_SYNC_WARM=1")
		}
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lastAcked atomic.Uint64
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if s, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					v, _ := strconv.ParseUint(s, 10, 64)
					lastAcked.Store(v)
				}
			}
		}()
		// Wait for the child's first commit, then kill it at a random point.
		testkit.WaitFor(t, 20*time.Second, "the child's first commit", func() bool { return lastAcked.Load() > 0 })
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-readDone
		err := cmd.Wait()
		if !testkit.KilledBySIGKILL(cmd) {
			t.Fatalf("round %d: child was not killed by SIGKILL: %v; stderr: %s", i, err, stderr.String())
		}
		// For the log's count only: a commit the child sent before it died
		// has a moment to land (nothing to wait on: it may never come).
		time.Sleep(20 * time.Millisecond)
		c, err := lastCommitted(context.Background(), nc, testStream, "agent-k", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if c.Seq > lastAcked.Load() {
			landedUnacked++
		}
	}
	// A last, unkilled run drains the backlog; then verify.
	store, st := openStore(t, dir)
	defer store.Close()
	rp := startReplica(t, nc, st, "agent-k", ReplicatorConfig{}, JetStreamOptions{})
	waitCaughtUp(t, nc, st, "agent-k", 60*time.Second)
	t.Logf("final run: %+v", rp.r.Stats())
	if err := rp.close(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "abandoned-batch advisories", func() bool { return abandoned.Load() > 0 })
	ev, commits := verifyCentral(t, nc, st, "agent-k")
	t.Logf("%d SIGKILL rounds: %d batches abandoned by the server (kills inside a transaction), %d rounds whose last commit landed without the child reporting its ack; central: %d events in %d commits",
		n, abandoned.Load(), landedUnacked, ev, commits)
}
