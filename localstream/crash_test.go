package localstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

const (
	crashDirEnv = "EDGE_LOCALSTREAM_CRASH_DIR"
	// crashWindowEnv is the child's group commit window (default if empty).
	crashWindowEnv = "EDGE_LOCALSTREAM_CRASH_WINDOW"
)

// crashPayload is the deterministic payload of writer w's event seq: sizes
// from a few bytes to past the value-log threshold (1 KiB) and the
// payload-file threshold (4 KiB).
func crashPayload(w, seq uint64) []byte {
	r := rand.New(rand.NewPCG(w, seq))
	n := 8 + r.IntN(9000)
	b := binary.BigEndian.AppendUint64(nil, seq)
	for len(b) < n {
		b = append(b, byte(r.Uint32()))
	}
	return b
}

// crashChild is the child process (role "crash") of TestSIGKILLDuringAppends: it
// appends from concurrent writers and scales until killed, printing each
// acknowledged append.
func crashChild() int {
	dir := os.Getenv(crashDirEnv)
	window, _ := time.ParseDuration(os.Getenv(crashWindowEnv))
	s, err := Open(dir, Options{Logger: slog.New(slog.DiscardHandler), GroupCommitWindow: window})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	st, err := s.CreateStream("crash", StreamConfig{Scaling: ScalingPolicy{MinSegments: 2}})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	next := map[string]uint64{}
	tail := st.TailCut()
	r, _ := st.NewReader(st.HeadCut(), &tail)
	for {
		rec, err := r.TryNext()
		if err != nil {
			break
		}
		next[rec.RoutingKey] = binary.BigEndian.Uint64(rec.Payload) + 1
	}
	var out sync.Mutex
	fmt.Println("READY")
	ctx := context.Background()
	for w := range uint64(8) {
		key := fmt.Sprintf("w%d", w)
		go func() {
			for seq := next[key]; ; seq++ {
				p, err := st.Append(ctx, Event{RoutingKey: key, Writer: "crash/" + key, EventTime: int64(seq), Payload: crashPayload(w, seq)})
				if err != nil {
					fmt.Println("ERR", err)
					os.Exit(3)
				}
				out.Lock()
				fmt.Printf("A %s %d %d %d\n", key, seq, p.Segment, p.Offset)
				out.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for {
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		open := st.Topology().Open()
		if len(open) > 4 {
			st.Merge(open[0].ID, open[1].ID)
		} else {
			st.Split(open[rng.IntN(len(open))].ID, 2)
		}
	}
}

// TestSIGKILLDuringAppends kills an appending subprocess at random moments,
// many rounds, and checks after each reopen that every acknowledged event is
// present once with the same bytes at its acknowledged position, that each
// key's events are a gap-free, duplicate-free sequence in order, and that
// nothing partial exists (every record decodes). Odd rounds give the child a
// long group commit window (20 ms), so that the kill often lands while a
// batch is held open.
func TestSIGKILLDuringAppends(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	dir := t.TempDir()
	rounds := testkit.Rounds(20)
	for round := range rounds {
		acked := map[string]map[uint64]Position{}
		cmd := testkit.ChildCommand("crash", crashDirEnv+"="+dir)
		if round%2 == 1 {
			cmd.Env = append(cmd.Env, crashWindowEnv+"=20ms")
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan struct{})
		firstAck := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			acks := 0
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				if line == "READY" {
					close(ready)
					continue
				}
				var key string
				var seq, seg, off uint64
				if _, err := fmt.Sscanf(line, "A %s %d %d %d", &key, &seq, &seg, &off); err != nil {
					if strings.HasPrefix(line, "ERR") {
						t.Errorf("child: %s", line)
					}
					continue
				}
				if acked[key] == nil {
					acked[key] = map[uint64]Position{}
				}
				acked[key][seq] = Position{Segment: SegmentID(seg), Offset: off}
				if acks++; acks == 1 {
					close(firstAck)
				}
			}
		}()
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("child never got ready")
		}
		// The kill lands while appends are in flight: after the first
		// acknowledgement (on a loaded machine the child's first fsync
		// can take longer than the random delay alone).
		select {
		case <-firstAck:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("child acknowledged no append in 30s")
		}
		time.Sleep(time.Duration(30+rng.IntN(300)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		werr := cmd.Wait()
		<-done
		if !testkit.KilledBySIGKILL(cmd) {
			t.Fatalf("round %d: child was not killed by SIGKILL: %v", round, werr)
		}
		n := 0
		for _, m := range acked {
			n += len(m)
		}
		if n == 0 {
			t.Fatalf("round %d: no append was acknowledged before the kill", round)
		}

		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		st, err := s.Stream("crash")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]Record{}
		for _, rec := range readAll(t, st) {
			got[rec.RoutingKey] = append(got[rec.RoutingKey], rec)
		}
		present := 0
		for key, recs := range got {
			var w uint64
			fmt.Sscanf(key, "w%d", &w)
			for i, rec := range recs {
				seq := binary.BigEndian.Uint64(rec.Payload)
				if seq != uint64(i) {
					t.Fatalf("round %d: %s event %d has seq %d (gap, duplicate or reorder)", round, key, i, seq)
				}
				if !bytes.Equal(rec.Payload, crashPayload(w, seq)) {
					t.Fatalf("round %d: %s seq %d bytes differ", round, key, seq)
				}
				if p, ok := acked[key][seq]; ok && p != rec.Position {
					t.Fatalf("round %d: %s seq %d acked at %v, found at %v", round, key, seq, p, rec.Position)
				}
			}
			present += len(recs)
		}
		for key, m := range acked {
			for seq := range m {
				if seq >= uint64(len(got[key])) {
					t.Fatalf("round %d: acknowledged %s seq %d lost (have %d)", round, key, seq, len(got[key]))
				}
			}
		}
		t.Logf("round %d: %d acked this round, %d present, %d segments", round, n, present, len(st.Topology().Segments))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
