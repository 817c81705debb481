package replicate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestReplicationFinalCommit is the agent's graceful stop through
// Replication: WaitCaughtUp, called before Run has started a replicator,
// waits for them (it returned at once, with nothing committed, when it
// did not); it returns once the stream with events is committed, beside a
// configured stream that never had an event; a stream of the store that
// is not configured is not replicated.
func TestReplicationFinalCommit(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	store := rigs.OpenStore(t, t.TempDir(), localstream.Options{})
	ctx := testCtx(t, 60*time.Second)
	tel, _ := store.CreateStream("telemetry", localstream.StreamConfig{})
	store.CreateStream("video", localstream.StreamConfig{})
	old, _ := store.CreateStream("old", localstream.StreamConfig{})
	for i := range 50 {
		ev := localstream.Event{RoutingKey: "d1", Writer: "telemetry/d1", EventTime: int64(i + 1), Payload: fmt.Appendf(nil, `{"i":%d}`, i)}
		if _, err := tel.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if _, err := old.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	inst := NewInstanceID()
	sink, err := NewJetStreamSink(connect(t, srv.ClientURL()), "agent-f", inst, JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReplication(store, sink, ReplicationConfig{Instance: inst, Streams: []string{"telemetry", "video"}})
	waited := make(chan error, 1)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	go func() { waited <- rep.WaitCaughtUp(wctx) }()
	// WaitCaughtUp is waiting before Run starts: nothing shows that it is
	// blocked, and a late start only weakens the case, never fails it.
	time.Sleep(100 * time.Millisecond)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- rep.Run(rctx) }()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := rep.Stats()
	if len(st) != 2 || st[0].Stream != "telemetry" || st[1].Stream != "video" {
		t.Fatalf("replicated streams %+v, want telemetry and video", st)
	}
	if st[0].Events != 50 || st[0].BacklogEvents != 0 {
		t.Fatalf("after WaitCaughtUp: telemetry %d events committed, %d behind", st[0].Events, st[0].BacklogEvents)
	}
	if took > 20*time.Second {
		t.Fatalf("WaitCaughtUp took %v: it waited for the empty stream", took)
	}
	t.Logf("caught up %v after Run started", took)
}
