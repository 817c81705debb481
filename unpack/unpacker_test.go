package unpack

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/sync"
)

// TestUnpackLiveAgents: two agents replicate (layout 2) while an
// unpacker runs; the derived stream ends with every source event once,
// in the source's order, per drone 1..n.
func TestUnpackLiveAgents(t *testing.T) {
	srv := startCentral(t)
	nc := connect(t, srv.ClientURL())
	agents := []*testAgent{newTestAgent(t, "gs.1", 3), newTestAgent(t, "gs-2", 2)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reps []*sync.Replicator
	done := make(chan error, len(agents))
	for _, a := range agents {
		r, _ := a.replicate(t, connect(t, srv.ClientURL()), sync.JetStreamOptions{})
		reps = append(reps, r)
		go func() { done <- a.run(ctx, 2*time.Millisecond) }()
	}
	u, _ := startUnpacker(t, nc, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	defer func() { t.Logf("stats %+v last %d", u.Stats(), derivedLast(nc, testStream)) }()
	time.Sleep(1500 * time.Millisecond)
	cancel()
	want := map[string]map[string]int{}
	for i, a := range agents {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		a.waitReplicated(t, reps[i], 30*time.Second)
	}
	for _, a := range agents {
		want[a.id] = a.counts()
	}
	src := len(sourceEvents(t, nc, testStream))
	waitFor(t, 30*time.Second, "the unpacker to catch up", func() bool { return derivedLast(nc, testStream) == uint64(src) })
	n := verifyDerived(t, nc, testStream, want)
	st := u.Stats()
	t.Logf("%d events; stats %+v", n, st)
	if st.Events != uint64(n) || st.Corrupt != 0 || st.Oversize != 0 || st.Fenced != 0 {
		t.Fatalf("stats %+v for %d events", st, n)
	}
}
