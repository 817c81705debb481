package watermark

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// killChildEnv names the data directory of the re-executed test binary
// that plays the agent (role "agent").
const killChildEnv = "WATERMARK_KILL_CHILD"

func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"agent": func() int {
		if err := killChild(os.Getenv(killChildEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 3
		}
		return 0
	}})
}

// killChild appends and notes for four writers forever, scales the stream
// twice, and prints each watermark after Local or CommittedAt returned it:
//
//	L <lower> <cut text>
//	C <lower> <cut text>
func killChild(dir string) error {
	ctx := context.Background()
	s, err := localstream.Open(dir, localstream.Options{MinFreeBytes: -1})
	if err != nil {
		return err
	}
	st, err := s.CreateStream("video", localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
	if err != nil {
		return err
	}
	tr, err := NewTracker(st, s, Options{IdleTimeout: time.Hour})
	if err != nil {
		return err
	}
	keys := []string{"papa", "kilo", "echo", "lima"}
	var cuts []localstream.StreamCut
	for i := 0; ; i++ {
		for j, k := range keys {
			if _, _, err := ingest(ctx, st, tr, "w/"+k, k, int64(1_000_000+i*1000+j)); err != nil {
				return err
			}
		}
		switch i {
		case 15: // split the low half
			if _, err := st.Split(st.Topology().Open()[0].ID, 2); err != nil {
				return err
			}
		case 30: // merge a split successor with an epoch-0 segment
			open := st.Topology().Open()
			if _, err := st.Merge(open[1].ID, open[2].ID); err != nil {
				return err
			}
		}
		if i%3 == 0 {
			w, err := tr.Local()
			if err != nil {
				return err
			}
			fmt.Printf("L %d %s\n", w.LowerNs, w.Cut)
		}
		cuts = append(cuts, st.TailCut())
		if len(cuts) > 4 {
			w, err := tr.CommittedAt(cuts[len(cuts)-4])
			if err != nil {
				return err
			}
			fmt.Printf("C %d %s\n", w.LowerNs, w.Cut)
		}
	}
}

// TestTrackerSurvivesKill SIGKILLs an agent process at a random point and
// checks that the restarted tracker's watermarks are not older than the
// last ones the process published, and that they hold against the
// records in the store.
func TestTrackerSurvivesKill(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("WATERMARK_SEED"), 10, 64); err == nil {
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed=%d (rerun with WATERMARK_SEED=%d)", seed, seed)
	for round := range envInt("EDGE_KILL_ROUNDS", 3) {
		dir := t.TempDir()
		lines := 30 + rng.IntN(90)
		cmd := testkit.ChildCommand("agent", killChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var lastL, lastC string
		n := 0
		for n < lines && sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "L "):
				lastL = l
			case strings.HasPrefix(l, "C "):
				lastC = l
			}
			n++
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Drain what the child wrote before it died: each line is one
		// write below PIPE_BUF (atomic), so the last one is the last
		// watermark it published.
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "L "):
				lastL = l
			case strings.HasPrefix(l, "C "):
				lastC = l
			}
			n++
		}
		_ = cmd.Wait()
		if !testkit.KilledBySIGKILL(cmd) || n < lines {
			t.Fatalf("round %d: child not killed by SIGKILL after %d lines (state %v)", round, n, cmd.ProcessState)
		}
		if lastL == "" || lastC == "" {
			t.Fatalf("round %d: child published nothing before the kill", round)
		}
		s, st := openStore(t, dir)
		tr, err := NewTracker(st, s, Options{IdleTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		topo := st.Topology()
		local, err := tr.Local()
		if err != nil {
			t.Fatal(err)
		}
		comm, err := tr.CommittedAt(st.TailCut())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			line string
			got  Watermark
		}{{lastL, local}, {lastC, comm}} {
			f := strings.Fields(c.line)
			lower, _ := strconv.ParseInt(f[1], 10, 64)
			cut, err := localstream.ParseStreamCut(f[2])
			if err != nil {
				t.Fatal(err)
			}
			if c.got.LowerNs < lower {
				t.Errorf("round %d: after the kill %s, older than published %q", round, c.got, c.line)
			}
			if le, err := topo.LessEq(cut, c.got.Cut); err != nil || !le {
				t.Errorf("round %d: after the kill cut %s before published %q (%v)", round, c.got.Cut, c.line, err)
			}
		}
		checkAgainstRecords(t, st, comm, "committed")
		checkAgainstRecords(t, st, local, "local")
		t.Logf("round %d: killed after %d lines; published %q / %q; resumed local %s committed %s",
			round, n, lastL, lastC, local, comm)
		s.Close()
	}
}
