package unpack

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// TestMain lets the test binary run as an unpacker process (child role
// "unpacker"), so that tests can SIGKILL it.
func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"unpacker": childUnpacker})
}

// childUnpacker runs the unpacker of the test stream on the URLs in
// EDGE_UNPACK_URLS (derived stream R3) until killed. With
// EDGE_UNPACK_PARTITIONS=N and EDGE_UNPACK_PARTITION=I it runs what
// `central unpack --stream telemetry --partitions N --partition I
// --replicas 3` runs: a Service with Options.Only.
func childUnpacker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: strings.Split(os.Getenv("EDGE_UNPACK_URLS"), ","), Name: "unpack-child"}, log)
	if err != nil {
		log.Error("connect", "err", err)
		return 1
	}
	// EDGE_UNPACK_PENDING: Options.MaxPending (the pair runs the
	// default, an ack every 409 messages, and 16, an ack every 3).
	pending, _ := strconv.Atoi(os.Getenv("EDGE_UNPACK_PENDING"))
	opts := Options{Replicas: 3, MaxPending: pending, Logger: log, StandbyCheck: 300 * time.Millisecond, RetryWait: 100 * time.Millisecond, AckTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second}
	var u interface{ Run(context.Context) error }
	if n, _ := strconv.Atoi(os.Getenv("EDGE_UNPACK_PARTITIONS")); n > 1 {
		i, _ := strconv.Atoi(os.Getenv("EDGE_UNPACK_PARTITION"))
		opts.Partitions, opts.Only = n, []int{i}
		u, err = NewService(nc, []string{testStream}, opts)
	} else {
		u, err = New(nc, testStream, opts)
	}
	if err != nil {
		log.Error("new", "err", err)
		return 1
	}
	if err := u.Run(ctx); err != nil {
		log.Error("run", "err", err)
		return 1
	}
	return 0
}

// child is one unpacker subprocess.
type child struct {
	cmd *exec.Cmd
}

// startChild starts an unpacker process (childUnpacker; env adds to its
// environment).
func startChild(t *testing.T, urls []string, pending int, env ...string) *child {
	t.Helper()
	cmd := testkit.ChildCommand("unpacker", append([]string{"EDGE_UNPACK_URLS=" + strings.Join(urls, ","), "EDGE_UNPACK_PENDING=" + strconv.Itoa(pending)}, env...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd}
	t.Cleanup(func() { c.kill(t) })
	return c
}

// kill SIGKILLs the child and checks that the signal ended it.
func (c *child) kill(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	if !testkit.KilledBySIGKILL(c.cmd) {
		t.Fatalf("unpacker child was not killed: %v", c.cmd.ProcessState)
	}
}

// TestUnpackSurvivesKillsAndLeaderChanges: in an R3 cluster, two agents
// replicate through link proxies that are cut, while an active/standby
// pair of unpacker processes is SIGKILLed over and over and the derived
// stream's leader is shut down: the derived stream ends with every
// source event once, in the source's order, per drone 1..n.
// EDGE_ROUNDS raises the rounds (default 4), EDGE_SEED replays one.
func TestUnpackSurvivesKillsAndLeaderChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test of a minute")
	}
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 31))
	agents := []*testAgent{newTestAgent(t, "gs-a", 3), newTestAgent(t, "gs.b", 2)}
	rig := startClusterRig(t, "unpack", agents, 3*time.Millisecond)
	nodes, urls, nc, proxies := rig.nodes, rig.urls, rig.nc, rig.proxies
	// One asks for an ack every 409 messages (the default), the other
	// every 3.
	pendings := []int{0, 16}
	children := []*child{startChild(t, urls, pendings[0]), startChild(t, urls, pendings[1])}
	derived := DerivedStreamName(testStream)
	testkit.WaitFor(t, 60*time.Second, "the derived stream to grow", func() bool { return derivedLast(nc, testStream) > 50 })

	n := testkit.Rounds(4)
	var kills, leaderKills int
	for round := range n {
		// Kill while the derived stream moves, after a random number of
		// its messages.
		before, k := derivedLast(nc, testStream), uint64(1+rng.IntN(300))
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("the derived stream to move by %d", k), func() bool { return derivedLast(nc, testStream) >= before+k })
		for i, c := range children {
			if i == 0 || rng.IntN(2) == 0 {
				c.kill(t)
				kills++
				children[i] = startChild(t, urls, pendings[i])
			}
		}
		for _, p := range proxies {
			if rng.IntN(2) == 0 {
				p.Cut()
			}
		}
		if round%2 == 1 {
			leader := -1
			testkit.WaitFor(t, 30*time.Second, "a derived stream leader", func() bool {
				for i, nd := range nodes {
					if nd.Running() && nd.IsStreamLeader(derived) {
						leader = i
						return true
					}
				}
				return false
			})
			nodes[leader].Shutdown()
			leaderKills++
			after := derivedLast(nc, testStream)
			testkit.WaitFor(t, 60*time.Second, "the derived stream to move under a new leader", func() bool { return derivedLast(nc, testStream) > after })
			if err := nodes[leader].Start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := rig.stop(t, 90*time.Second)
	waitCurrent(t, nc, wire.StreamName(testStream))
	src := uint64(len(waitSource(t, nc, testStream, total(agents...))))
	testkit.WaitFor(t, 90*time.Second, "the unpackers to catch up", func() bool { return derivedLast(nc, testStream) >= src })
	waitCurrent(t, nc, derived)
	for _, c := range children {
		c.kill(t)
	}
	events := verifyDerived(t, nc, testStream, want)
	cuts := rig.cuts()
	t.Logf("%d rounds: %d unpacker SIGKILLs, %d derived-leader shutdowns, %d link cuts; %d events once, in order", n, kills, leaderKills, cuts, events)
	if kills < n || leaderKills < n/2 || cuts == 0 {
		t.Fatalf("faults did not happen: %d kills, %d leader kills, %d cuts", kills, leaderKills, cuts)
	}
}

// waitCurrent waits until every replica of an R3 stream is current.
func waitCurrent(t *testing.T, nc *nats.Conn, name string) {
	t.Helper()
	js, _ := jetstream.New(nc)
	testkit.WaitFor(t, 60*time.Second, name+" replicas current", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, name)
		if err != nil {
			return false
		}
		ci := st.CachedInfo().Cluster
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
}
