package live

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// holdLiveSubjects makes the centre refuse EDGELIVE: another stream holds
// its subjects (as a centre of another set-up might), so creating it
// fails with "subjects overlap". It returns the holding stream's name.
func holdLiveSubjects(t *testing.T, s *station) string {
	t.Helper()
	js, err := jetstream.New(s.reader)
	if err != nil {
		t.Fatal(err)
	}
	const name = "HOLDER"
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subjectPrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// liveValue is drone's telemetry value at the centre (nil: none).
func liveValue(ctx context.Context, s *station, drone string) *Value {
	vals, err := Read(ctx, s.reader, ReadOptions{Agent: s.agent, Stream: "telemetry", Drone: drone})
	if err != nil || len(vals) == 0 {
		return nil
	}
	return &vals[0]
}

// hasSeq reports whether v is the telemetry value number seq.
func hasSeq(v *Value, seq int) bool {
	return v != nil && strings.Contains(string(v.Payload), fmt.Sprintf(`"seq":%d,`, seq))
}

// sendNext appends drone d1's next telemetry value (number *seq + 1) and
// waits for it at the centre; what names the step in a failure.
func sendNext(ctx context.Context, t *testing.T, s *station, seq *int, what string) {
	t.Helper()
	*seq++
	s.appendNoted(ctx, "telemetry", telemetryEvent("d1", *seq, time.Now().UnixNano()))
	var v *Value
	if !testkit.Until(10*time.Second, func() bool { v = liveValue(ctx, s, "d1"); return hasSeq(v, *seq) }) {
		st := s.lane.Stats()
		t.Fatalf("%s: value %d not at the centre (there: %v; lane: %d sent, %d publish errors, %d ensure errors, %q)",
			what, *seq, v != nil, st.Streams[0].Sent, st.Streams[0].PublishErrors, st.EnsureErrors, st.LastError)
	}
}

// TestLaneSendsOnlyAckedValues: a landed drone's last value, while the
// centre refuses EDGELIVE, then holds it once the obstacle is gone. The
// value is sent only into the stream, with an acknowledgement, and counts
// as sent only then (issue 37 case 4: for a second after a failed stream
// check the lane published without an ack into a centre without
// EDGELIVE and marked the value sent: it never reached the centre).
func TestLaneSendsOnlyAckedValues(t *testing.T) {
	ctx := context.Background()
	s := newStation(t, stationOpts{})
	holder := holdLiveSubjects(t, s)
	s.appendNoted(ctx, "telemetry", telemetryEvent("d1", 1, time.Now().UnixNano())) // its last value: it landed
	s.start(stationOpts{lane: true})
	testkit.WaitFor(t, 10*time.Second, "a refused stream check", func() bool { return s.lane.Stats().EnsureErrors >= 1 })
	js, _ := jetstream.New(s.reader)
	if err := js.DeleteStream(ctx, holder); err != nil {
		t.Fatal(err)
	}
	var v *Value
	if !testkit.Until(5*time.Second, func() bool { v = liveValue(ctx, s, "d1"); return hasSeq(v, 1) }) {
		st := s.lane.Stats()
		t.Fatalf("the landed drone's last value never reached the centre (lane: %d sent, %d ensure errors, %q)", st.Streams[0].Sent, st.EnsureErrors, st.LastError)
	}
	st := s.lane.Stats()
	t.Logf("lane: %d sent, %d publish errors, %d ensure errors", st.Streams[0].Sent, st.Streams[0].PublishErrors, st.EnsureErrors)
	if st.Streams[0].Sent != 1 {
		t.Fatalf("%d values counted sent for the one at the centre", st.Streams[0].Sent)
	}
}

// TestLaneRefusedSendsNothing: a centre that refuses EDGELIVE gets no
// value, and none is counted in sent or bytes or drawn from the lane's
// share (issue 37 case 12: values were counted and used up the share,
// while docs/live.md says the lane then sends nothing).
func TestLaneRefusedSendsNothing(t *testing.T) {
	ctx := context.Background()
	s := newStation(t, stationOpts{})
	holdLiveSubjects(t, s)
	cfg := NewDefaultConfig()
	cfg.Streams["telemetry"] = StreamConfig{Interval: 100 * time.Millisecond}
	s.start(stationOpts{lane: true, live: cfg, capBps: 100_000})
	fly, stop := context.WithCancel(ctx)
	defer stop()
	go newFleet(4, 0).fly(fly, s.append)
	testkit.WaitFor(t, 30*time.Second, "three refused stream checks", func() bool { return s.lane.Stats().EnsureErrors >= 3 })
	st := s.lane.Stats()
	t.Logf("lane after %d refused checks: %+v; live frames at the link %d (%d bytes); share tokens %.0f of %d", st.EnsureErrors, st.Streams[0], s.proxy.liveMsgs.Load(), s.proxy.liveBytes.Load(), s.lane.share.Tokens(), s.lane.shareChunk)
	if ss := st.Streams[0]; ss.Drones == 0 || ss.Sent != 0 || ss.Bytes != 0 || !ss.LastSent.IsZero() {
		t.Fatalf("a refused lane counted values: %+v", ss)
	}
	if n := s.proxy.liveMsgs.Load(); n != 0 {
		t.Fatalf("%d live values crossed the link to a centre that refuses EDGELIVE", n)
	}
	if tok := s.lane.share.Tokens(); tok < float64(s.lane.shareChunk)-1 {
		t.Fatalf("the share was drawn: %.0f tokens of %d left", tok, s.lane.shareChunk)
	}
	if !strings.Contains(st.LastError, "create stream") {
		t.Fatalf("last error %q does not say the stream was refused", st.LastError)
	}
}

// TestLaneRechecksStreamAfterReconnect: the centre loses EDGELIVE twice:
// deleted while the link is up (the next value's publish is refused: the
// lane checks the stream again) and while the link is down (the same
// nats.Conn reconnects: the lane checks the stream after the reconnect,
// before any value is due). Each time the drone's next value reaches the
// centre (issue 37 case 5: the check ran once per connection, and a
// centre back without EDGELIVE never got it again).
func TestLaneRechecksStreamAfterReconnect(t *testing.T) {
	ctx := context.Background()
	s := newStation(t, stationOpts{})
	s.start(stationOpts{lane: true})
	js, _ := jetstream.New(s.reader)
	seq := 0
	next := func(what string) { t.Helper(); sendNext(ctx, t, s, &seq, what) }
	next("first value")

	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	next("EDGELIVE deleted, link up")

	reconnects := s.nc.Stats().Reconnects
	s.proxy.setDown(true)
	testkit.WaitFor(t, 5*time.Second, "the link down", func() bool { return !s.nc.IsConnected() })
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	s.proxy.setDown(false)
	testkit.WaitFor(t, 10*time.Second, "the same connection reconnected", func() bool {
		return s.nc.IsConnected() && s.nc.Stats().Reconnects > reconnects
	})
	if !testkit.Until(5*time.Second, func() bool {
		_, err := js.Stream(ctx, StreamName)
		return err == nil
	}) {
		_, err := js.Stream(ctx, StreamName)
		t.Fatalf("no EDGELIVE %v after the reconnect with no value due: %v", 5*time.Second, err)
	}
	next("EDGELIVE lost while the link was down")
}
