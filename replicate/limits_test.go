package replicate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// forLayouts runs a test against both central layouts.
func forLayouts(t *testing.T, f func(t *testing.T, layout int)) {
	for _, layout := range []int{1, 2} {
		t.Run(fmt.Sprint("layout", layout), func(t *testing.T) { f(t, layout) })
	}
}

// waitReplicated waits until the central commit of the replica's agent
// covers the local tail, failing at once if the stream stopped: "the
// stream never stopped" is part of every limits case.
func waitReplicated(t testing.TB, nc *nats.Conn, st *localstream.Stream, rp *replica, agent string, d time.Duration) {
	t.Helper()
	tail := st.TailCut()
	if testkit.Until(d, func() bool {
		if s := rp.r.Stats(); s.State == StateStopped {
			t.Fatalf("stream stopped: %s", s.Stopped)
		}
		c, err := lastCommitted(context.Background(), nc, st.Name(), agent, 2*time.Second)
		if err != nil || c.Seq == 0 {
			return false
		}
		cut, _ := c.Record.StreamCut()
		le, _ := st.Topology().LessEq(tail, cut)
		return le
	}) {
		return
	}
	s := rp.r.Stats()
	t.Fatalf("central did not reach the local tail %s in %s: state %s, last error %q, committed %s", tail, d, s.State, s.LastError, s.CommittedCut)
}

// appendAround appends good events of every drone, then bad (durably,
// with its writer mark), then good events again; it returns bad's position.
func appendAround(t testing.TB, app *appender, bad localstream.Event) localstream.Position {
	t.Helper()
	for range 3 {
		if err := app.warm(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	pos, err := app.st.Append(context.Background(), bad)
	if err != nil {
		t.Fatal(err)
	}
	if tr := trackerFor(app.st); tr != nil {
		if err := tr.Note(bad.Writer, bad.EventTime, pos); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := app.warm(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return pos
}

// oversizedVideoEvent is the case 1: a chunk just under the
// chunker's 900 KiB cap whose per-frame PTS header (7,000 frames) pushes
// the central message over the 1 MiB max payload.
func oversizedVideoEvent(app *appender) localstream.Event {
	pts := make([]string, 7000)
	base := app.base + app.n.Add(10)*1000
	for i := range pts {
		pts[i] = fmt.Sprint(base + int64(i))
	}
	return localstream.Event{
		RoutingKey: "evil", Writer: "video/evil", EventTime: base, IngestTime: time.Now().UnixNano(),
		ContentType: "video/h264", Flags: localstream.FlagKeyframe,
		Headers: []localstream.Header{{Key: "frame-pts", Value: strings.Join(pts, ",")}},
		Payload: make([]byte, 900<<10),
	}
}

// TestOversizedEventBecomesMarker (issue 10, case 1): one event that does
// not fit the centre's max payload is replaced there by a marker with
// its position and the reason; every other event, before and after it in
// the same transaction, arrives exactly once; the stream never stops.
func TestOversizedEventBecomesMarker(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout int) {
		srv := rigs.StartCentral(t, central.Config{})
		store, st := openStore(t, t.TempDir())
		defer store.Close()
		nc := connect(t, srv.ClientURL())
		app := newAppender(st, 4)
		bad := appendAround(t, app, oversizedVideoEvent(app))
		rp := startReplica(t, nc, st, "agent-big", ReplicatorConfig{}, JetStreamOptions{Layout: layout})
		waitReplicated(t, nc, st, rp, "agent-big", 20*time.Second)
		rp.close()
		markers := verifyCentralMarked(t, nc, st, "agent-big", map[localstream.Position]bool{bad: true})
		m := markers[bad]
		if !strings.Contains(m.Dropped, "max payload") {
			t.Fatalf("marker reason %q does not say why", m.Dropped)
		}
		if m.Record.RoutingKey != "evil" || m.Record.Writer != "video/evil" || len(m.Record.Payload) != 0 {
			t.Fatalf("marker %+v", m.Record)
		}
		if s := rp.r.Stats(); s.Dropped != 1 {
			t.Fatalf("dropped counter %d, want 1", s.Dropped)
		}
	})
}

// TestLongRoutingKeyKeepsConnection (issue 10, case 2): a drone id whose
// escaped subject token is longer than the server's control line (4,096
// bytes) neither kills the connection nor stops the stream; readers get
// the real key back.
func TestLongRoutingKeyKeepsConnection(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout int) {
		srv := rigs.StartCentral(t, central.Config{})
		store, st := openStore(t, t.TempDir())
		defer store.Close()
		nc := connect(t, srv.ClientURL())
		app := newAppender(st, 4)
		for i, key := range []string{strings.Repeat("é.", 700), strings.Repeat("x", 4050)} {
			ev := app.event(0)
			ev.RoutingKey, ev.Writer = key, fmt.Sprint("telemetry/long-", i)
			appendAround(t, app, ev)
		}
		rp := startReplica(t, nc, st, "agent-long", ReplicatorConfig{}, JetStreamOptions{Layout: layout})
		waitReplicated(t, nc, st, rp, "agent-long", 20*time.Second)
		rp.close()
		verifyCentral(t, nc, st, "agent-long")
		if nc.IsClosed() {
			t.Fatal("the connection was closed")
		}
		// The reader's drone filter finds the long key's events by their
		// bounded token.
		key := strings.Repeat("x", 4050)
		items, err := centralread.ReadAll(testCtx(t, 30*time.Second), nc, testStream, centralread.ReadOptions{Agent: "agent-long", RoutingKey: key})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, it := range items {
			if it.Kind == centralread.ItemEvent {
				if it.Event.Record.RoutingKey != key {
					t.Fatalf("drone filter returned key %.20q…", it.Event.Record.RoutingKey)
				}
				n++
			}
		}
		if n != 1 {
			t.Fatalf("drone filter: %d events, want 1", n)
		}
	})
}

// TestReplicatorReplacesClosedConnection (issue 10): a server-side error
// that makes nats.go close the connection for good (a control line over
// the server's limit) is followed by a new connection; the replicator
// continues on it.
func TestReplicatorReplacesClosedConnection(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout int) {
		srv := rigs.StartCentral(t, central.Config{})
		store, st := openStore(t, t.TempDir())
		defer store.Close()
		nc := connect(t, srv.ClientURL())
		check := connect(t, srv.ClientURL())
		app := newAppender(st, 4)
		if err := app.warm(context.Background()); err != nil {
			t.Fatal(err)
		}
		rp := startReplica(t, nc, st, "agent-closed", ReplicatorConfig{}, JetStreamOptions{Layout: layout})
		waitReplicated(t, check, st, rp, "agent-closed", 20*time.Second)
		// The fault: a subject longer than the control line.
		nc.Publish("edge.x."+strings.Repeat("y", 5000), nil)
		testkit.WaitFor(t, 10*time.Second, "the connection closed by the server's error", nc.IsClosed)
		for range 5 {
			if err := app.warm(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		waitReplicated(t, check, st, rp, "agent-closed", 20*time.Second)
		rp.close()
		verifyCentral(t, check, st, "agent-closed")
	})
}

// TestHeaderValuesRoundTripThroughServer (issue 10, case 3): writer ids,
// content types and topics that NATS would alter (surrounding spaces,
// CR/LF, control bytes, a leading '%') arrive byte-exact, so
// "telemetry/d1 " stays a writer distinct from "telemetry/d1".
func TestHeaderValuesRoundTripThroughServer(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout int) {
		srv := rigs.StartCentral(t, central.Config{})
		store, st := openStore(t, t.TempDir())
		defer store.Close()
		nc := connect(t, srv.ClientURL())
		app := newAppender(st, 2)
		odd := []string{"telemetry/d1 ", " telemetry/d1", "telemetry/d1", "a\r\nb", "\t", "%41", "x\x00y\x7f", "%", " ", "drône ✈"}
		for i, v := range odd {
			ev := app.event(i % 2)
			ev.Writer, ev.ContentType = v, v
			ev.Headers = []localstream.Header{{Key: "mqtt-topic", Value: v}, {Key: "frame-pts", Value: v}, {Key: v, Value: v}}
			if err := app.append(ev); err != nil {
				t.Fatal(err)
			}
		}
		rp := startReplica(t, nc, st, "agent-hdr", ReplicatorConfig{}, JetStreamOptions{Layout: layout})
		waitReplicated(t, nc, st, rp, "agent-hdr", 20*time.Second)
		rp.close()
		verifyCentral(t, nc, st, "agent-hdr") // byte-exact records
	})
}

// TestLoweredServerBatchLimits (issue 10, case 4): the server's max batch
// size and in-flight batches per stream are set below the agent's
// defaults; the agent adapts and the stream never stops.
func TestLoweredServerBatchLimits(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout int) {
		srv := rigs.StartCentral(t, central.Config{MaxBatchSize: 40, MaxBatchInflightPerStream: 1})
		store, st := openStore(t, t.TempDir())
		defer store.Close()
		nc := connect(t, srv.ClientURL())
		app := newAppender(st, 5)
		for range 100 { // a backlog of 500 events
			if err := app.warm(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		rp := startReplica(t, nc, st, "agent-low", ReplicatorConfig{}, JetStreamOptions{Layout: layout})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := app.run(ctx, 2*time.Millisecond, 5); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitReplicated(t, nc, st, rp, "agent-low", 60*time.Second)
		s := rp.r.Stats()
		t.Logf("caught up %s after the appends", time.Since(start))
		rp.close()
		_, commits := verifyCentral(t, nc, st, "agent-low")
		t.Logf("%d commits; replicator %d retries; limits %+v", commits, s.Retries, s.Limits)
		if layout == 1 && s.Limits.MaxBatchSize != 40 { // layout 2 sends no batches
			t.Fatalf("learned max batch size %d, want 40", s.Limits.MaxBatchSize)
		}
	})
}

// TestSinkLearnsInflightLimit: with one open batch per stream allowed, a
// second batch opened while the first is open is refused by the server
// (its first message dropped, its commit "incomplete"); the sink learns
// to keep one open batch, and the first batch still commits.
func TestSinkLearnsInflightLimit(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{MaxBatchInflightPerStream: 1})
	s, err := NewJetStreamSink(connect(t, srv.ClientURL()), "agent-1", newInstance(), JetStreamOptions{Layout: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := testCtx(t, 20*time.Second)
	if err := s.Prepare(ctx, "telemetry"); err != nil {
		t.Fatal(err)
	}
	if got := s.Limits().MaxBatchInflight; got != 50 {
		t.Fatalf("default in-flight batches %d, want 50", got)
	}
	rec := func(off uint64) localstream.Record {
		return localstream.Record{Position: localstream.Position{Offset: off}, Event: localstream.Event{RoutingKey: "d", Writer: "w", Payload: []byte("x")}}
	}
	cut := func(off uint64) localstream.StreamCut {
		return localstream.StreamCut{Stream: "telemetry", Positions: map[localstream.SegmentID]uint64{0: off}}
	}
	a := s.Begin("telemetry", 1)
	if err := a.Add(ctx, rec(0)); err != nil {
		t.Fatal(err)
	}
	// The server has a's first message before b's.
	if _, err := lastCommitted(ctx, s.Conn(), "telemetry", "agent-1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b := s.Begin("telemetry", 2)
	if err := b.Add(ctx, rec(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Commit(ctx, Committed{}, cut(2), watermark.Watermark{}, wire.CommitMeta{}); !batchIncomplete(err) || classify(err) != classRetryable {
		t.Fatalf("second open batch: %v (%s), want incomplete and retryable", err, classify(err))
	}
	if got := s.Limits().MaxBatchInflight; got != 1 {
		t.Fatalf("learned in-flight batches %d, want 1", got)
	}
	if c, err := a.Commit(ctx, Committed{}, cut(1), watermark.Watermark{}, wire.CommitMeta{}); err != nil || c.Seq == 0 {
		t.Fatalf("first batch: %+v, %v", c, err)
	}
}

// TestFailingStreamIsAProblem: a stream that keeps failing with a
// retryable error (the central stream sealed under it) and events waiting
// is reported, with the error, by Stats().Problem — it is not silent.
func TestFailingStreamIsAProblem(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	nc := connect(t, srv.ClientURL())
	app := newAppender(st, 2)
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp := startReplica(t, nc, st, "agent-seal", ReplicatorConfig{}, JetStreamOptions{})
	waitReplicated(t, nc, st, rp, "agent-seal", 20*time.Second)
	if p := rp.r.Stats().Problem(time.Now(), 0); p != "" {
		t.Fatalf("problem while replicating: %s", p)
	}
	js, _ := jetstream.New(nc)
	ctx := testCtx(t, 20*time.Second)
	s, err := js.Stream(ctx, wire.StreamName(testStream))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Sealed = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := app.warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	var p string
	testkit.WaitFor(t, 20*time.Second, "the failing stream reported", func() bool {
		p = rp.r.Stats().Problem(time.Now(), 0)
		return p != ""
	})
	if s := rp.r.Stats(); s.State == StateStopped || !strings.Contains(p, "sealed") {
		t.Fatalf("problem %q, stats %+v", p, s)
	}
	t.Log(p)
}

// TestEventsAtTheMaxPayloadBoundary: events from well below to above the
// max payload, a byte-step apart around the limit, each arrive whole or
// as a marker, exactly once; the stream never stops or sticks on one.
func TestEventsAtTheMaxPayloadBoundary(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout int) {
		srv := rigs.StartCentral(t, central.Config{MaxPayload: 256 << 10})
		store, st := openStore(t, t.TempDir())
		defer store.Close()
		nc := connect(t, srv.ClientURL())
		app := newAppender(st, 3)
		mp := 256 << 10
		var sizes []int
		for k := -3000; k <= 300; k += 37 {
			sizes = append(sizes, mp+k)
		}
		for i, n := range sizes {
			ev := app.event(i % 3)
			ev.Payload = make([]byte, n)
			if err := app.append(ev); err != nil {
				t.Fatal(err)
			}
			if err := app.append(app.event((i + 1) % 3)); err != nil {
				t.Fatal(err)
			}
		}
		rp := startReplica(t, nc, st, "agent-edge", ReplicatorConfig{}, JetStreamOptions{Layout: layout})
		waitReplicated(t, nc, st, rp, "agent-edge", 60*time.Second)
		rp.close()
		local := localEvents(t, st)
		items, err := centralread.ReadAll(testCtx(t, 60*time.Second), nc, testStream, centralread.ReadOptions{Agent: "agent-edge"})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[localstream.Position]bool{}
		markers := 0
		for _, it := range items {
			if it.Kind != centralread.ItemEvent {
				continue
			}
			r := it.Event.Record
			want, ok := local[r.Position]
			if !ok || seen[r.Position] {
				t.Fatalf("event %s: in the local store %v, seen before %v", r.Position, ok, seen[r.Position])
			}
			seen[r.Position] = true
			if it.Event.Dropped != "" {
				markers++
				if len(want.Payload) < mp-4096 {
					t.Fatalf("event %s of %d bytes became a marker: %s", r.Position, len(want.Payload), it.Event.Dropped)
				}
				continue
			}
			if len(r.Payload) != len(want.Payload) {
				t.Fatalf("event %s: %d bytes, want %d", r.Position, len(r.Payload), len(want.Payload))
			}
		}
		if len(seen) != len(local) {
			t.Fatalf("%d of %d events at the centre", len(seen), len(local))
		}
		t.Logf("%d events, %d markers; replicator %d retries, dropped %d", len(seen), markers, rp.r.Stats().Retries, rp.r.Stats().Dropped)
		if markers == 0 || uint64(markers) != rp.r.Stats().Dropped {
			t.Fatalf("%d markers, dropped counter %d", markers, rp.r.Stats().Dropped)
		}
	})
}
