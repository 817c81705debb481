package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// The crash test re-executes this test binary as the agent (child role
// "agent"), the listener benchmark as its publishers ("publisher").
func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"agent": childMain, "publisher": benchPublisherMain})
}

// childStats is what the agent subprocess reports through its stats file.
type childStats struct {
	StoredAtStart int
	Stats         Stats
}

// childMain is the agent subprocess: a real store and a real ingester,
// reporting its counters to a file every 10 ms until SIGTERM (or SIGKILL).
func childMain() int {
	dir, statsPath := os.Getenv("EDGE_DIR"), os.Getenv("EDGE_STATS")
	s, err := localstream.Open(dir, localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 1
	}
	defer s.Close()
	st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: stream:", err)
		return 1
	}
	stored := 0
	to := st.TailCut()
	r, _ := st.NewReader(st.HeadCut(), &to)
	for {
		if _, err := r.Next(context.Background()); err != nil {
			break
		}
		stored++
	}
	cfg := testConfig(os.Getenv("EDGE_BROKER"), os.Getenv("EDGE_CLIENT"))
	in, err := New(cfg, Sink{Stream: st, Meta: s})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: new:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		for {
			b, _ := json.Marshal(childStats{StoredAtStart: stored, Stats: in.Stats()})
			tmp := statsPath + ".tmp"
			if os.WriteFile(tmp, b, 0o644) == nil {
				os.Rename(tmp, statsPath)
			}
			time.Sleep(10 * time.Millisecond) // the child's reporting period
		}
	}()
	if err := in.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child: run:", err)
		return 1
	}
	b, _ := json.Marshal(childStats{StoredAtStart: stored, Stats: in.Stats()})
	os.WriteFile(statsPath, b, 0o644)
	return 0
}

// agentProc is one incarnation of the agent subprocess.
type agentProc struct {
	cmd   *exec.Cmd
	stats string
	// done is closed when the process has been waited for; err is Wait's result.
	done chan struct{}
	err  error
}

func startAgent(t *testing.T, brokerURL, dir, client string, n int) *agentProc {
	t.Helper()
	statsPath := filepath.Join(t.TempDir(), fmt.Sprintf("stats-%d.json", n))
	cmd := testkit.ChildCommand("agent", "EDGE_DIR="+dir, "EDGE_STATS="+statsPath,
		"EDGE_BROKER="+brokerURL, "EDGE_CLIENT="+client)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, stats: statsPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	return p
}

// read returns the incarnation's last reported stats.
func (p *agentProc) read() (childStats, bool) {
	var cs childStats
	b, err := os.ReadFile(p.stats)
	if err != nil || json.Unmarshal(b, &cs) != nil {
		return cs, false
	}
	return cs, true
}

func (p *agentProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// TestAgentKilledWhilePublishing: the simulator publishes for several drones
// while the agent subprocess is SIGKILLed and restarted several times; the
// store then holds every (drone, seq) exactly once, in publish order per drone.
func TestAgentKilledWhilePublishing(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 5))
	kills := testkit.Rounds(4)
	b := startBroker(t)
	dir := t.TempDir()
	const client = "agent-crash"
	subscribeOnce(t, b.URL(), client, "drones/+/telemetry/#", "drones/+/status")

	const drones = 4
	perDrone := 600 * kills
	var res mqttsim.Result
	simDone := make(chan struct{})
	go func() {
		defer close(simDone)
		var err error
		res, err = mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: drones, Count: perDrone,
			Rate: 800, Window: 8, Seed: seed})
		if err != nil {
			t.Error(err)
		}
	}()
	finished := func() bool {
		select {
		case <-simDone:
			return true
		default:
			return false
		}
	}
	total := drones * perDrone
	var dupSkipped uint64
	killedMidStream := 0
	for i := 0; i < kills; i++ {
		p := startAgent(t, b.URL(), dir, client, i)
		testkit.WaitFor(t, 30*time.Second, "agent appending", func() bool {
			cs, ok := p.read()
			return ok && (cs.Stats.Appended > 0 || cs.StoredAtStart >= total)
		})
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond) // the kill comes at a random point of the run
		cs, _ := p.read()
		if !p.alive() {
			t.Fatalf("incarnation %d died before the kill", i)
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		if !testkit.KilledBySIGKILL(p.cmd) {
			t.Fatalf("incarnation %d: not killed by SIGKILL: %v", i, p.err)
		}
		stored := cs.StoredAtStart + int(cs.Stats.Appended)
		if stored < total {
			killedMidStream++
		}
		dupSkipped += cs.Stats.DuplicatesSkipped
		t.Logf("kill %d: stored≈%d of %d, appended %d, duplicates skipped %d", i, stored, total, cs.Stats.Appended, cs.Stats.DuplicatesSkipped)
		if finished() && stored >= total {
			break
		}
	}
	<-simDone
	if res.Published != uint64(total) {
		t.Fatalf("simulator published %d of %d", res.Published, total)
	}
	if killedMidStream < min(2, kills) {
		t.Fatalf("only %d kills happened while messages were outstanding: the test proved too little", killedMidStream)
	}
	// Final incarnation drains the backlog and stops cleanly.
	p := startAgent(t, b.URL(), dir, client, kills)
	testkit.WaitFor(t, 60*time.Second, "backlog drained", func() bool {
		cs, ok := p.read()
		return ok && cs.StoredAtStart+int(cs.Stats.Appended) >= total
	})
	time.Sleep(300 * time.Millisecond) // let stray redeliveries arrive: they must be skipped
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	if err := p.err; err != nil {
		t.Fatalf("final agent: %v", err)
	}
	cs, _ := p.read()
	dupSkipped += cs.Stats.DuplicatesSkipped
	t.Logf("kills=%d (mid-stream %d), redeliveries skipped as duplicates≈%d", kills, killedMidStream, dupSkipped)

	s, st := openStore(t, dir)
	defer s.Close()
	want := map[string]uint64{}
	for i := 1; i <= drones; i++ {
		want[mqttsim.Config{}.DroneName(i)] = uint64(perDrone)
	}
	recs := readAll(t, st)
	if msg := verifyExactlyOnce(recs, want); msg != "" {
		t.Fatalf("%s (%d records)", msg, len(recs))
	}
}
