package replicate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// commitGaps records, per agent, when each commit was acked, to find the
// longest time an agent went without one and how soon it committed after
// a fault.
type commitGaps struct {
	mu    sync.Mutex
	start time.Time
	times map[string][]time.Time
}

func newCommitGaps(start time.Time) *commitGaps {
	return &commitGaps{start: start, times: map[string][]time.Time{}}
}

func (g *commitGaps) onCommit(agent string) func(Committed, []int64) {
	return func(Committed, []int64) { g.note(agent, time.Now()) }
}

func (g *commitGaps) note(agent string, at time.Time) {
	g.mu.Lock()
	g.times[agent] = append(g.times[agent], at)
	g.mu.Unlock()
}

// longest is each agent's longest time without a commit between start
// and end (an agent without any commit counts from start).
func (g *commitGaps) longest(agents []string, end time.Time) map[string]time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]time.Duration{}
	for _, a := range agents {
		prev, worst := g.start, time.Duration(0)
		for _, at := range g.times[a] {
			if at.After(end) {
				break
			}
			worst, prev = max(worst, at.Sub(prev)), at
		}
		out[a] = max(worst, end.Sub(prev))
	}
	return out
}

// firstAfter is the agent's first commit after t (zero: none yet).
func (g *commitGaps) firstAfter(agent string, t time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, at := range g.times[agent] {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// fleetAgent is one simulated ground station: its own Badger store, an
// appender and the real replicator.
type fleetAgent struct {
	name  string
	store *localstream.Store
	st    *localstream.Stream
	app   *appender
	rp    *replica
}

// TestFleetNoStarvationUnderBatchLimit is issue 13 scaled down: the
// server allows two atomic batches in flight per stream, three busy agents
// share the stream. Every agent must keep committing; none may go without
// a commit for longer than the stated bound.
func TestFleetNoStarvationUnderBatchLimit(t *testing.T) {
	testkit.Seed(t)
	srv := rigs.StartCentral(t, central.Config{MaxBatchInflightPerStream: 2})
	const agents = 3
	const bound = 3 * time.Second // generous: the machine is shared
	var fleet []*fleetAgent
	var names []string
	for i := range agents {
		name := fmt.Sprintf("station-%d", i)
		store, st := openStore(t, t.TempDir())
		t.Cleanup(func() { store.Close() })
		a := &fleetAgent{name: name, store: store, st: st, app: newAppender(st, 4)}
		if err := a.app.warm(context.Background()); err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, a)
		names = append(names, name)
	}
	// The bound counts from the replicators' start, not the stores' setup.
	gaps := newCommitGaps(time.Now())
	for _, a := range fleet {
		a.rp = startReplica(t, connect(t, srv.ClientURL()), a.st, a.name, ReplicatorConfig{OnCommit: gaps.onCommit(a.name)}, JetStreamOptions{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for _, a := range fleet {
		wg.Go(func() { errs <- a.app.run(ctx, time.Millisecond, 4) })
	}
	wg.Wait()
	end := time.Now()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	longest := gaps.longest(names, end)
	for _, a := range fleet {
		s := a.rp.r.Stats()
		t.Logf("%s: %d commits, %d retries, longest without a commit %s", a.name, s.Txns, s.Retries, longest[a.name].Round(time.Millisecond))
	}
	for _, a := range fleet {
		if longest[a.name] > bound {
			t.Errorf("%s went %s without a commit (bound %s)", a.name, longest[a.name].Round(time.Millisecond), bound)
		}
	}
	if t.Failed() {
		return
	}
	nc := connect(t, srv.ClientURL())
	for _, a := range fleet {
		waitCaughtUp(t, nc, a.st, a.name, 30*time.Second)
		a.rp.close()
		verifyCentral(t, nc, a.st, a.name)
	}
}

// TestStallIsReported: a station whose uplink is down while events wait
// says so in Stats().Problem (/status, /healthz), and no longer once it
// has committed them.
func TestStallIsReported(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	app := newAppender(st, 2)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp := startReplica(t, connect(t, px.URL()), st, "stalls", ReplicatorConfig{}, JetStreamOptions{})
	testkit.WaitFor(t, 20*time.Second, "a first commit", func() bool { return rp.r.Stats().Txns > 0 })
	px.SetDown(true)
	for range 5 {
		if err := app.append(app.event(0)); err != nil {
			t.Fatal(err)
		}
	}
	problem := func() string { return rp.r.Stats().Problem(time.Now(), 500*time.Millisecond) }
	testkit.WaitFor(t, 20*time.Second, "the stall reported", func() bool { return problem() != "" })
	if p := problem(); !strings.Contains(p, "events waiting") {
		t.Fatalf("stall message %q", p)
	}
	px.SetDown(false)
	testkit.WaitFor(t, 20*time.Second, "the stall cleared", func() bool { return problem() == "" && rp.r.Stats().BacklogEvents == 0 })
}
