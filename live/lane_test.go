package live

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestLaneSendsLatestPerDrone: each drone's latest telemetry, and its
// latest keyframe with video turned on, reach the centre with their ages;
// a value is covered once the committed watermark passed it; no value of
// a drone is sent more often than its interval.
func TestLaneSendsLatestPerDrone(t *testing.T) {
	ctx := context.Background()
	cfg := NewDefaultConfig()
	on := true
	cfg.Streams["video"] = StreamConfig{Enabled: &on, Interval: time.Second}
	s := newStation(t, stationOpts{})
	s.start(stationOpts{lane: true, live: cfg})
	start := time.Now()
	base := start.UnixNano()
	drones := []string{"d1", "d2", "d3"}
	var lastKey []byte
	var lastKeyPTS int64
	for i := range 30 { // 3 s at 10 Hz
		ns := base + int64(i)*int64(100*time.Millisecond)
		for _, d := range drones {
			s.appendNoted(ctx, "telemetry", telemetryEvent(d, i, ns))
		}
		if i%10 == 0 {
			ev := videoEvent("v1", ns, 3000, 200)
			c, _ := video.DecodeChunk(ev)
			lastKey, lastKeyPTS = c.FrameData(0), c.Frames[0].PTS
			s.appendNoted(ctx, "video", ev)
		}
		time.Sleep(time.Until(time.Unix(0, ns+int64(100*time.Millisecond)))) // the drones' 10 Hz, in real time
	}
	lastNs := base + 29*int64(100*time.Millisecond)
	var vals []Value
	testkit.WaitFor(t, 5*time.Second, "the latest value of every drone at the centre", func() bool {
		var err error
		vals, err = Read(ctx, s.reader, ReadOptions{Agent: "a1"})
		if err != nil {
			return false
		}
		n := 0
		for _, v := range vals {
			if v.Stream == "telemetry" && v.EventTimeNs == lastNs || v.Stream == "video" && v.EventTimeNs == lastKeyPTS {
				n++
			}
		}
		return n == 4
	})
	for _, v := range vals {
		if v.Age <= 0 || v.Age > 10*time.Second {
			t.Errorf("%s/%s: age %v", v.Stream, v.Drone, v.Age)
		}
		if v.Stream == "video" && (!v.Keyframe || !bytes.Equal(v.Payload, lastKey)) {
			t.Errorf("video value: keyframe %v, %d bytes, want the last keyframe's %d bytes", v.Keyframe, len(v.Payload), len(lastKey))
		}
		if v.Stream == "telemetry" && !bytes.Contains(v.Payload, fmt.Appendf(nil, `"time_ns":%d`, lastNs)) {
			t.Errorf("telemetry %s: payload %s is not the latest", v.Drone, v.Payload)
		}
	}
	// 3 s of 10 Hz: at most one value per drone and second (plus the first).
	elapsed := time.Since(start)
	for _, ss := range s.lane.Stats().Streams {
		if ss.Stream != "telemetry" {
			continue
		}
		if limit := uint64(3 * (elapsed.Seconds() + 1)); ss.Sent > limit || ss.Sent < 3 {
			t.Errorf("telemetry values sent: %d in %v for 3 drones at 1 s (want 3..%d)", ss.Sent, elapsed, limit)
		}
	}
	// Telemetry not covered yet: the drones' writers hold the committed
	// watermark at their last noted time at most.
	for _, v := range vals {
		if v.Stream == "telemetry" && (v.Covered || v.CommittedLowerNs > v.Time()) {
			t.Errorf("%s/%s covered (lower %d, time %d) before the backlog passed it", v.Stream, v.Drone, v.CommittedLowerNs, v.Time())
		}
	}
	// The lane stops; the drones fly on: the backlog's committed
	// watermark passes the preview's times, which are now covered.
	s.stopLane()
	for i := 30; i < 40; i++ {
		ns := base + int64(i)*int64(100*time.Millisecond)
		for _, d := range drones {
			s.appendNoted(ctx, "telemetry", telemetryEvent(d, i, ns))
		}
	}
	// (The keyframe is covered once its chunk committed: the chunk's
	// later frames moved the video watermark past it.)
	testkit.WaitFor(t, 10*time.Second, "the previews covered by the committed watermarks", func() bool {
		vals, err := Read(ctx, s.reader, ReadOptions{Agent: "a1"})
		if err != nil || len(vals) != 4 {
			return false
		}
		for _, v := range vals {
			if v.Stream == "telemetry" && v.EventTimeNs != lastNs {
				t.Fatalf("%s: the stopped lane sent %d", v.Drone, v.EventTimeNs)
			}
			if !v.Covered || v.CommittedLowerNs <= v.EventTimeNs {
				return false
			}
		}
		return true
	})
}

// TestCentreKeepsOneValueWithTTL: EDGELIVE keeps one message per drone and
// stream however many values were sent, and a drone gone longer than the
// TTL drops out of the preview.
func TestCentreKeepsOneValueWithTTL(t *testing.T) {
	ctx := context.Background()
	cfg := NewDefaultConfig()
	cfg.TTL = time.Second
	cfg.Streams["telemetry"] = StreamConfig{Interval: 100 * time.Millisecond}
	s := newStation(t, stationOpts{})
	s.start(stationOpts{lane: true, live: cfg})
	base := time.Now().UnixNano()
	for i := range 20 {
		for _, d := range []string{"d1", "d2"} {
			s.appendNoted(ctx, "telemetry", telemetryEvent(d, i, base+int64(i)*int64(100*time.Millisecond)))
		}
		time.Sleep(100 * time.Millisecond) // the drones' 10 Hz, in real time
	}
	var sent uint64
	testkit.WaitFor(t, 5*time.Second, "several values a drone sent", func() bool {
		sent = s.lane.Stats().Streams[0].Sent
		return sent >= 6
	})
	s.stopLane()
	js, _ := jetstream.New(s.reader)
	st, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs > 2 || info.Config.MaxMsgsPerSubject != 1 || !info.Config.AllowMsgTTL {
		t.Errorf("EDGELIVE holds %d messages after %d values of 2 drones (max per subject %d, TTLs %v)",
			info.State.Msgs, sent, info.Config.MaxMsgsPerSubject, info.Config.AllowMsgTTL)
	}
	testkit.WaitFor(t, 10*time.Second, "the values gone after their TTL of 1 s", func() bool {
		vals, err := Read(ctx, s.reader, ReadOptions{Agent: "a1"})
		return err == nil && len(vals) == 0
	})
}
