package replicate

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/edge-agent/edge-agent/localstream"
)

// produceLogged appends an event with a unique payload (tag-n) every
// 3 ms and prints "ev <payload> <segment> <offset> <store>" once it is
// acknowledged (the child of TestIdentityChaos).
func produceLogged(st *localstream.Stream, tag string, mu *sync.Mutex, out *bufio.Writer) {
	p := newProducer()
	p.tag = tag
	for {
		time.Sleep(3 * time.Millisecond) // the producer's pace
		if err := p.one(st); err != nil {
			continue
		}
		p.mu.Lock()
		pl := fmt.Sprintf("%s-%d", tag, p.n)
		a := p.acked[pl]
		p.mu.Unlock()
		mu.Lock()
		fmt.Fprintf(out, "ev %s %d %d %s\n", pl, uint64(a.pos.Segment), a.pos.Offset, a.store)
		out.Flush()
		mu.Unlock()
	}
}

// chaosChild is one agent process of TestIdentityChaos.
type chaosChild struct {
	cmd      *exec.Cmd
	stderr   strings.Builder
	acked    atomic.Uint64 // commits acked
	readDone chan struct{}
}

func startChaosChild(t *testing.T, p *producer, dir, url, station, tag string) *chaosChild {
	t.Helper()
	c := &chaosChild{cmd: testkit.ChildCommand("agent", "EDGE_SYNC_DIR="+dir, "EDGE_SYNC_URL="+url,
		"EDGE_SYNC_AGENT=agent-chaos", "EDGE_SYNC_STATION="+station, "EDGE_SYNC_EVENTS="+tag), readDone: make(chan struct{})}
	stdout, _ := c.cmd.StdoutPipe()
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "acked":
				c.acked.Add(1)
			case len(f) == 5 && f[0] == "ev":
				seg, _ := strconv.ParseUint(f[2], 10, 64)
				off, _ := strconv.ParseUint(f[3], 10, 64)
				p.mu.Lock()
				p.acked[f[1]] = ackedEvent{pos: localstream.Position{Segment: localstream.SegmentID(seg), Offset: off}, store: f[4]}
				p.mu.Unlock()
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	return c
}

// kill SIGKILLs the child and checks that SIGKILL ended it (false: it had
// exited by itself, its error in stderr).
func (c *chaosChild) kill(t *testing.T) bool {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.readDone
	c.cmd.Wait()
	return testkit.KilledBySIGKILL(c.cmd)
}

// TestIdentityChaos (issue 29): a station's agent is SIGKILLed round
// after round while its uplink is cut now and then; every few rounds a
// twin (another station, same agent id) is started and stopped, and the
// station's store is restored from a backup taken a few rounds before.
// Every acknowledged event is at the centre exactly once or inside a
// reported gap of its store, never both, never silently missing; the twin
// never commits; the station's agent is never refused. EDGE_ROUNDS raises
// the rounds (default 10; the run: 40), EDGE_SEED replays.
func TestIdentityChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 29))
	srv := rigs.StartCentral(t, central.Config{MaxBatchTimeout: 300 * time.Millisecond})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	nc := connect(t, srv.ClientURL())
	dir := filepath.Join(t.TempDir(), "store")
	backup := filepath.Join(t.TempDir(), "backup")
	p := newProducer()
	n := testkit.Rounds(10)
	var kills, twins, restores, linkCuts int
	haveBackup := false
	for i := range n {
		switch {
		case i%5 == 1:
			os.RemoveAll(backup)
			copyDir(t, dir, backup) // of the stopped agent: durable state
			haveBackup = true
		case i%5 == 4 && haveBackup:
			os.RemoveAll(dir)
			copyDir(t, backup, dir)
			restores++
		}
		c := startChaosChild(t, p, dir, px.URL(), testStation, fmt.Sprintf("r%d", i))
		var twin *chaosChild
		if i%5 == 2 {
			twin = startChaosChild(t, p, filepath.Join(t.TempDir(), "twin"), srv.ClientURL(), "station-twin", fmt.Sprintf("t%d", i))
		}
		if rng.IntN(3) == 0 { // a link cut of 0.2-1.7 s at a random moment: the fault
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			px.SetDown(true)
			time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
			px.SetDown(false)
			linkCuts++
		}
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: a commit of the station's agent", i), func() bool {
			if c.cmd.ProcessState != nil {
				t.Fatalf("round %d: the station's agent stopped: %s", i, c.stderr.String())
			}
			return c.acked.Load() > 0
		})
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // SIGKILL at a random point
		if !c.kill(t) {
			t.Fatalf("round %d: the station's agent ended before SIGKILL: %s", i, c.stderr.String())
		}
		kills++
		if twin != nil {
			testkit.WaitFor(t, 20*time.Second, "the twin refused", func() bool { return strings.Contains(twin.stderr.String(), "another station uses this agent id") })
			twin.kill(t)
			if twin.acked.Load() != 0 {
				t.Fatalf("round %d: the twin committed %d times", i, twin.acked.Load())
			}
			twins++
		}
	}
	// A last, unkilled run drains the backlog.
	f := startNode(t, nc, dir, "agent-chaos", ReplicatorConfig{})
	waitAllAt(t, nc, f, "agent-chaos", p, 60*time.Second)
	s := f.rp.r.Stats()
	f.stop(t)
	if s.Stopped != "" {
		t.Fatalf("final run stopped: %s", s.Stopped)
	}
	rep := readLoss(t, nc, "agent-chaos") // no event twice, no position reused, none in a gap
	lost, acked, delivered := 0, 0, 0
	p.mu.Lock()
	for pl, a := range p.acked {
		twinEvent := strings.HasPrefix(pl, "t")
		if !twinEvent {
			acked++
		}
		if _, ok := rep.events[pl]; ok {
			if twinEvent {
				t.Fatalf("the twin's event %s at the centre", pl)
			}
			delivered++
			continue
		}
		if twinEvent {
			continue // the twin's: refused, kept locally
		}
		if !inGapOfStore(rep, a) {
			t.Fatalf("event %s (local %s, store %s) neither at the centre nor in a reported gap of its store (gaps %v)", pl, a.pos, a.store, rep.lost)
		}
		lost++
	}
	p.mu.Unlock()
	if linkCuts > 0 && px.Cuts() == 0 {
		t.Fatal("no link was cut")
	}
	if len(rep.lost) < restores {
		t.Fatalf("%d restores, %d gaps reported", restores, len(rep.lost))
	}
	t.Logf("%d SIGKILLs, %d link cuts (%d connections cut), %d twins refused, %d backups restored; the station's agent acknowledged %d events: %d at the centre once, %d lost inside %d reported gaps (%d events at the centre in all, some appended by a child killed before it printed the ack)",
		kills, linkCuts, px.Cuts(), twins, restores, acked, delivered, lost, len(rep.lost), len(rep.events))
}

// inGapOfStore reports whether an acknowledged event that is not at the
// centre lies in a reported gap of its store, under whichever epoch base
// the gap names (the event's local segment shifted by it).
func inGapOfStore(rep lossReport, a ackedEvent) bool {
	for _, g := range rep.lost {
		if g.Store != a.store {
			continue
		}
		for key, from := range g.From {
			id, err := strconv.ParseUint(key, 10, 64)
			if err != nil {
				continue
			}
			cs := localstream.SegmentID(id)
			if cs.Epoch() < a.pos.Segment.Epoch() {
				continue
			}
			base := cs.Epoch() - a.pos.Segment.Epoch()
			if shift(a.pos.Segment, base) != cs || a.pos.Offset < from {
				continue
			}
			if to, ok := g.To[key]; ok && a.pos.Offset >= to {
				continue
			}
			return true
		}
	}
	return false
}
