package unpack

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replicate"
)

// TestRetriesBackOffWhileCentreAway: while the centre is away, the
// unpacker's failed sessions come further and further apart (doubling,
// with jitter, up to Options.MaxRetryWait) and its log does not grow
// with them: a line at failures 1, 2, 4, 8, ..., and one when a session
// works again.
func TestRetriesBackOffWhileCentreAway(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	p := testkit.NewProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"), testkit.ProxyHooks{})
	log := &testkit.SyncBuffer{}
	a := newTestAgent(t, "gs-1", 2)
	for range 5 {
		if err := a.appendRound(); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
	a.waitReplicated(t, r, 30*time.Second)
	// The centre is away from the unpacker's start (its client keeps
	// trying to connect).
	p.SetDown(true)
	nc := connect(t, "nats://"+p.Addr())
	u, _ := startUnpacker(t, nc, Options{RetryWait: 10 * time.Millisecond, MaxRetryWait: 400 * time.Millisecond,
		RequestTimeout: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(log, nil))})
	const failures = 12
	testkit.WaitFor(t, 60*time.Second, "failed sessions while the centre is away", func() bool { return u.Stats().Sessions >= failures+1 })
	lines := strings.Count(log.String(), "session failed")
	s := u.Stats()
	t.Logf("%d failed sessions, %d log lines; stats %+v", s.Sessions-1, lines, s)
	// 1, 2, 4, 8 (and 16 if it got there).
	if lines > 5 {
		t.Fatalf("%d log lines for %d failed sessions:\n%s", lines, s.Sessions-1, log.String())
	}
	// The 12th wait is capped: at least half the cap (the jitter), at
	// most the cap.
	if s.Failures < failures || s.RetryIn < 200*time.Millisecond || s.RetryIn > 400*time.Millisecond {
		t.Fatalf("after %d failures the next retry in %s (want 200..400 ms)", s.Failures, s.RetryIn)
	}
	p.SetDown(false)
	testkit.WaitFor(t, 30*time.Second, "a session that works again", func() bool { return strings.Contains(log.String(), "recovered") })
	testkit.WaitFor(t, 30*time.Second, "the events unpacked", func() bool { return u.Stats().Events == 10 })
	if s := u.Stats(); s.Failures != 0 || s.State != StateActive {
		t.Fatalf("after recovery: %+v", s)
	}
}
