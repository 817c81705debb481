package replicate

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/wire"
)

// TestExactlyOnceAcrossServerRestarts (c): the central server restarts
// several times while events are appended and replicated.
func TestExactlyOnceAcrossServerRestarts(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	srv := rigs.StartCentral(t, central.Config{})
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	nc := connect(t, srv.ClientURL())
	app := newAppender(st, 5)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp := startReplica(t, nc, st, "agent-c", ReplicatorConfig{}, JetStreamOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	appDone := make(chan error, 1)
	go func() { appDone <- app.run(ctx, 2*time.Millisecond, 4) }()
	n := testkit.Rounds(4)
	for range n {
		before := rp.r.Stats().Txns
		testkit.WaitFor(t, 20*time.Second, "a commit before the restart", func() bool { return rp.r.Stats().Txns > before })
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond) // the restart at a random point
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-appDone; err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, nc, st, "agent-c", 30*time.Second)
	stats := rp.r.Stats()
	rp.close()
	ev, commits := verifyCentral(t, nc, st, "agent-c")
	t.Logf("%d restarts, %d reconnects; replicator %d retries; central %d events in %d commits", n, nc.Stats().Reconnects, stats.Retries, ev, commits)
	// A layout-2 transaction talks to the server only while its one
	// message is in flight, so a restart between commits need not cost a
	// retry; that the restarts happened is proven by the reconnects.
	if nc.Stats().Reconnects < uint64(n) {
		t.Fatalf("%d reconnects for %d restarts: the restarts never hit the agent", nc.Stats().Reconnects, n)
	}
}

// TestExactlyOnceAcrossLeaderFailover (d): in a 3-node cluster the R3
// stream's leader is killed (and comes back) while events flow.
func TestExactlyOnceAcrossLeaderFailover(t *testing.T) {
	testkit.Seed(t)
	ctx0 := testCtx(t, 60*time.Second)
	nodes, err := central.StartLocalCluster(ctx0, t.TempDir(), "edge", 3, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	urls := []string{nodes[0].ClientURL(), nodes[1].ClientURL(), nodes[2].ClientURL()}
	nc := connect(t, urls...)
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	app := newAppender(st, 5)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp := startReplica(t, nc, st, "agent-d", ReplicatorConfig{}, JetStreamOptions{Replicas: 3})
	ctx, cancel := context.WithCancel(context.Background())
	appDone := make(chan error, 1)
	go func() { appDone <- app.run(ctx, 3*time.Millisecond, 3) }()
	name := wire.StreamName(testStream)
	kills := testkit.Rounds(2)
	for range kills {
		before := rp.r.Stats().Txns
		testkit.WaitFor(t, 30*time.Second, "a commit before the kill", func() bool { return rp.r.Stats().Txns > before+2 })
		leader := -1
		testkit.WaitFor(t, 30*time.Second, "a stream leader", func() bool {
			for i, n := range nodes {
				if n.Running() && n.IsStreamLeader(name) {
					leader = i
					return true
				}
			}
			return false
		})
		nodes[leader].Shutdown()
		after := rp.r.Stats().Txns
		testkit.WaitFor(t, 30*time.Second, "a commit under the new leader", func() bool { return rp.r.Stats().Txns > after+2 })
		if nodes[leader].IsStreamLeader(name) {
			t.Fatal("a stopped node leads")
		}
		if err := nodes[leader].Start(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-appDone; err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, nc, st, "agent-d", 60*time.Second)
	// Let the restarted replica catch up before the ordered consumer of the
	// verification is placed.
	js, _ := jetstream.New(nc)
	testkit.WaitFor(t, 60*time.Second, "all replicas current", func() bool {
		info, err := js.Stream(context.Background(), name)
		if err != nil {
			return false
		}
		ci := info.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
			return false
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	})
	stats := rp.r.Stats()
	rp.close()
	ev, commits := verifyCentral(t, nc, st, "agent-d")
	t.Logf("%d leader kills; replicator %d retries; central %d events in %d commits", kills, stats.Retries, ev, commits)
}

// TestTwoAgentsSameIDOneIsFenced: two agent processes with the same id
// (separate local stores) replicate at once; exactly one keeps committing,
// the other stops with ErrFenced.
func TestTwoAgentsSameIDOneIsFenced(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	var reps []*replica
	var stores []func() error
	for range 2 {
		store, st := openStore(t, t.TempDir())
		stores = append(stores, store.Close)
		app := newAppender(st, 3)
		if err := app.warm(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go app.run(ctx, 3*time.Millisecond, 3)
		reps = append(reps, startReplica(t, connect(t, srv.ClientURL()), st, "same-id", ReplicatorConfig{}, JetStreamOptions{}))
	}
	var fenced, alive int
	testkit.WaitFor(t, 30*time.Second, "one agent fenced", func() bool {
		for _, rp := range reps {
			select {
			case err := <-rp.done:
				rp.done <- err
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("agent stopped with %v, want ErrFenced", err)
				}
				return true
			default:
			}
		}
		return false
	})
	for _, rp := range reps {
		s := rp.r.Stats()
		if s.State == StateStopped {
			fenced++
			if !strings.Contains(s.Stopped, "another agent uses this agent id") {
				t.Fatalf("stopped without a clear message: %q", s.Stopped)
			}
			continue
		}
		alive++
		before := s.Txns
		testkit.WaitFor(t, 10*time.Second, "the other agent to keep committing", func() bool { return rp.r.Stats().Txns > before+3 })
	}
	if fenced != 1 || alive != 1 {
		t.Fatalf("%d fenced, %d alive; want 1 and 1", fenced, alive)
	}
	for _, rp := range reps {
		rp.close()
	}
	for _, c := range stores {
		c()
	}
}

// TestOutageLongerThanDuplicateWindow: the link drops right after the
// server committed (ack lost) and stays down longer than the stream's
// duplicate window; after it returns there is still no duplicate, because
// the resume reads the commit, not dedup.
func TestOutageLongerThanDuplicateWindow(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	nc := connect(t, px.URL())
	app := newAppender(st, 4)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	const window = 500 * time.Millisecond
	rp := startReplica(t, nc, st, "agent-o", ReplicatorConfig{}, JetStreamOptions{DuplicateWindow: window})
	ctx, cancel := context.WithCancel(context.Background())
	appDone := make(chan error, 1)
	go func() { appDone <- app.run(ctx, 3*time.Millisecond, 3) }()
	testkit.WaitFor(t, 10*time.Second, "first commits", func() bool { return rp.r.Stats().Txns > 2 })
	px.dropAfterCommit.Store(true)
	testkit.WaitFor(t, 10*time.Second, "a dropped ack", func() bool { return px.droppedAcks.Load() == 1 })
	px.SetDown(true)
	time.Sleep(3 * window) // an outage beyond the duplicate window: the fault
	px.SetDown(false)
	before := rp.r.Stats().Txns
	testkit.WaitFor(t, 10*time.Second, "commits after the outage", func() bool { return rp.r.Stats().Txns > before+2 })
	cancel()
	if err := <-appDone; err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, nc, st, "agent-o", 30*time.Second)
	rp.close()
	ev, commits := verifyCentral(t, connect(t, srv.ClientURL()), st, "agent-o")
	t.Logf("outage %s > duplicate window %s; central %d events in %d commits", 3*window, window, ev, commits)
}
