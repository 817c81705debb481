package replicate

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

func rec(seg localstream.SegmentID, off uint64, key string, et int64) localstream.Record {
	return localstream.Record{
		Position: localstream.Position{Segment: seg, Offset: off},
		Event:    localstream.Event{RoutingKey: key, Writer: "w/" + key, EventTime: et, ContentType: "text/plain", Payload: fmt.Appendf(nil, "%s-%d", key, off)},
	}
}

func cutAt(stream string, off uint64) localstream.StreamCut {
	return localstream.StreamCut{Stream: stream, Positions: map[localstream.SegmentID]uint64{0: off}}
}

// streamMsgs returns the number of messages in EDGE_<stream>.
func streamMsgs(t testing.TB, s *JetStreamSink, stream string) uint64 {
	t.Helper()
	st, err := s.link.js.Stream(testCtx(t, 5*time.Second), wire.StreamName(stream))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestSinkCommitAndFencing: a transaction becomes visible with its commit
// record; a second transaction built on the same predecessor (another
// agent process with the same id) is rejected and leaves nothing.
func TestSinkCommitAndFencing(t *testing.T) {
	for _, layout := range []int{1, 2} {
		t.Run(fmt.Sprintf("layout%d", layout), func(t *testing.T) { testSinkCommitAndFencing(t, layout) })
	}
}

// newLayoutSink is newSink writing the given central layout.
func newLayoutSink(t testing.TB, nc *nats.Conn, agent string, layout int) *JetStreamSink {
	t.Helper()
	s, err := NewJetStreamSink(nc, agent, newInstance(), JetStreamOptions{Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testSinkCommitAndFencing(t *testing.T, layout int) {
	srv := rigs.StartCentral(t, central.Config{})
	ctx := testCtx(t, 30*time.Second)
	a := newLayoutSink(t, connect(t, srv.ClientURL()), "agent-1", layout)
	b := newLayoutSink(t, connect(t, srv.ClientURL()), "agent-1", layout)
	// Layout 1: a message per event and the commit record; layout 2: one.
	msgs := uint64(4)
	if layout == 2 {
		msgs = 1
	}
	if err := a.Prepare(ctx, "telemetry"); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(ctx, "telemetry"); err != nil { // idempotent
		t.Fatal(err)
	}
	prev, err := a.LastCommitted(ctx, "telemetry")
	if err != nil || prev.Seq != 0 {
		t.Fatalf("empty store: %+v %v", prev, err)
	}
	ta, tb := a.Begin("telemetry", 1), b.Begin("telemetry", 1)
	for i := range 3 {
		if err := ta.Add(ctx, rec(0, uint64(i), "d1", int64(100+i))); err != nil {
			t.Fatal(err)
		}
		if err := tb.Add(ctx, rec(0, uint64(i), "d1", int64(100+i))); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := ta.Commit(ctx, prev, cutAt("telemetry", 3), watermark.Watermark{LowerNs: 100, UpperNs: 102}, wire.CommitMeta{})
	if err != nil {
		t.Fatal(err)
	}
	if ca.Seq != msgs || ca.Record.Txn != 1 || ca.Record.Events != 3 {
		t.Fatalf("commit %+v", ca)
	}
	_, err = tb.Commit(ctx, prev, cutAt("telemetry", 3), watermark.Watermark{}, wire.CommitMeta{})
	if classify(err) != classConflict {
		t.Fatalf("second commit on the same predecessor: %v (class %v), want a conflict", err, classify(err))
	}
	if n := streamMsgs(t, a, "telemetry"); n != msgs {
		t.Fatalf("stream holds %d messages, want %d (the rejected transaction must leave nothing)", n, msgs)
	}
	got, err := b.LastCommitted(ctx, "telemetry")
	if err != nil || got.Seq != ca.Seq || got.Record.Instance != a.instance || got.Record.Watermark.LowerNs != 100 {
		t.Fatalf("LastCommitted = %+v, %v; want seq %d of instance %s", got, err, ca.Seq, a.instance)
	}
	// The chain continues from the read-back commit.
	tc := b.Begin("telemetry", got.Record.Txn+1)
	if tc.Number() != 2 {
		t.Fatalf("next txn number %d", tc.Number())
	}
	if _, err := tc.Commit(ctx, got, cutAt("telemetry", 3), watermark.Watermark{}, wire.CommitMeta{}); err != nil {
		t.Fatal(err)
	}
}

// TestSinkRefusesStreamWithoutAtomic: an existing EDGE_ stream without
// allow_atomic is a clear permanent error.
func TestSinkRefusesStreamWithoutAtomic(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	ctx := testCtx(t, 30*time.Second)
	nc := connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EDGE_VIDEO", Subjects: []string{"edge.video.>"}}); err != nil {
		t.Fatal(err)
	}
	err := newSink(t, nc, "a").Prepare(ctx, "video")
	if !errors.Is(err, ErrAtomicUnsupported) || classify(err) != classPermanent {
		t.Fatalf("Prepare = %v, want ErrAtomicUnsupported", err)
	}
	if !serverAtLeast("2.12.0", 2, 12) || serverAtLeast("2.11.9", 2, 12) || !serverAtLeast("3.0.0", 2, 12) {
		t.Fatal("serverAtLeast")
	}
}

// TestSinkMidBatchCutLeavesNothing: the link is cut after part of a batch
// (layout 1) or of the transaction's message (layout 2) reached the
// server; nothing of it becomes visible, and a retry from the read-back
// commit succeeds.
func TestSinkMidBatchCutLeavesNothing(t *testing.T) {
	for _, layout := range []int{1, 2} {
		t.Run(fmt.Sprintf("layout%d", layout), func(t *testing.T) { testSinkMidBatchCut(t, layout) })
	}
}

func testSinkMidBatchCut(t *testing.T, layout int) {
	srv := rigs.StartCentral(t, central.Config{})
	px := newFaultProxy(t, srv.ClientURL()[len("nats://"):])
	ctx := testCtx(t, 30*time.Second)
	s := newLayoutSink(t, connect(t, px.URL()), "a", layout)
	if err := s.Prepare(ctx, "health"); err != nil {
		t.Fatal(err)
	}
	px.cutMidBatch.Store(true)
	tx := s.Begin("health", 1)
	var err error
	for i := 0; i < 50 && err == nil; i++ {
		err = tx.Add(ctx, rec(0, uint64(i), "h", int64(i)))
		time.Sleep(time.Millisecond) // the batch spans writes, for a cut in its middle
	}
	if err == nil {
		_, err = tx.Commit(ctx, Committed{}, cutAt("health", 50), watermark.Watermark{}, wire.CommitMeta{})
	}
	if err == nil || px.midBatchCuts.Load() != 1 {
		t.Fatalf("commit after a mid-batch cut: err=%v cuts=%d", err, px.midBatchCuts.Load())
	}
	var c Committed
	testkit.Until(10*time.Second, func() bool {
		c, err = s.LastCommitted(ctx, "health")
		return err == nil
	})
	if err != nil || c.Seq != 0 {
		t.Fatalf("after the cut: %+v %v", c, err)
	}
	if n := streamMsgs(t, s, "health"); n != 0 {
		t.Fatalf("%d messages of a cut batch are visible", n)
	}
	tx = s.Begin("health", c.Record.Txn+1)
	for i := range 5 {
		if err := tx.Add(ctx, rec(0, uint64(i), "h", int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Commit(ctx, c, cutAt("health", 5), watermark.Watermark{}, wire.CommitMeta{}); err != nil {
		t.Fatal(err)
	}
	if n, want := streamMsgs(t, s, "health"), map[int]uint64{1: 6, 2: 1}[layout]; n != want {
		t.Fatalf("%d messages, want %d", n, want)
	}
}
