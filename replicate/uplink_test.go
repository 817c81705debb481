package replicate

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestUplinkServesPriorityFirst: while a low-priority stream draws a large
// amount, a high-priority request that arrives later is served before the
// rest of it (grants are per chunk).
// The uplink is timer-driven logic: it runs in a synctest bubble, on the
// bubble's clock.
func TestUplinkServesPriorityFirst(t *testing.T) {
	synctest.Test(t, testUplinkServesPriorityFirst)
}

func testUplinkServesPriorityFirst(t *testing.T) {
	u := NewUplink(200 << 10) // 200 KiB/s, chunks of 4 KiB
	ctx := testCtx(t, 30*time.Second)
	var order []string
	done := make(chan string, 2)
	go func() {
		u.Wait(ctx, 2, 400<<10) // ~2 s of video
		done <- "video"
	}()
	synctest.Wait() // the video holds the uplink, waiting for its next chunk's tokens
	go func() {
		u.Wait(ctx, 0, 1000)
		done <- "telemetry"
	}()
	order = append(order, <-done, <-done)
	if order[0] != "telemetry" {
		t.Fatalf("served %v; telemetry must not wait for the video backlog", order)
	}
	var nilU *Uplink
	if err := nilU.Wait(ctx, 0, 1<<30); err != nil || NewUplink(0).Wait(ctx, 0, 1<<30) != nil {
		t.Fatal("an unlimited uplink waits")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := u.Wait(cctx, 1, 1<<20); err == nil {
		t.Fatal("Wait ignores a cancelled context")
	}
}

// TestReplicationTelemetryBeforeVideoBacklog: under a shared uplink cap, a
// large video backlog does not hold telemetry back: telemetry is fully
// committed while video still has a backlog.
func TestReplicationTelemetryBeforeVideoBacklog(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	store := rigs.OpenStore(t, t.TempDir(), localstream.Options{})
	ctx := testCtx(t, 60*time.Second)
	video, _ := store.CreateStream("video", localstream.StreamConfig{})
	tel, _ := store.CreateStream("telemetry", localstream.StreamConfig{})
	chunk := make([]byte, 32<<10)
	for i := range 60 { // ~2 MB: ~10 s at the cap
		if _, err := video.Append(ctx, localstream.Event{RoutingKey: "d1", Writer: "video/d1", EventTime: int64(i + 1), Flags: localstream.FlagKeyframe, Payload: chunk}); err != nil {
			t.Fatal(err)
		}
	}
	inst := NewInstanceID()
	sink, err := NewJetStreamSink(connect(t, srv.ClientURL()), "agent-p", inst, JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReplication(store, sink, ReplicationConfig{Instance: inst, UplinkBytesPerSec: 200 << 10, DiscoverInterval: 50 * time.Millisecond})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rep.Run(rctx) }()
	defer func() { cancel(); <-done }()
	testkit.WaitFor(t, 10*time.Second, "video replication started", func() bool {
		for _, s := range rep.Stats() {
			if s.Stream == "video" && s.Txns > 0 {
				return true
			}
		}
		return false
	})
	for i := range 20 {
		if _, err := tel.Append(ctx, localstream.Event{RoutingKey: "d1", Writer: "telemetry/d1", EventTime: int64(i + 1), Payload: fmt.Appendf(nil, `{"i":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	var videoBacklog uint64
	testkit.WaitFor(t, 20*time.Second, "telemetry committed", func() bool {
		for _, s := range rep.Stats() {
			if s.Stream == "telemetry" && s.Events == 21-1 && s.BacklogEvents == 0 {
				for _, v := range rep.Stats() {
					if v.Stream == "video" {
						videoBacklog = v.BacklogEvents
					}
				}
				return true
			}
		}
		return false
	})
	if videoBacklog == 0 {
		t.Fatal("video backlog drained before telemetry was committed: telemetry waited for video")
	}
	st := rep.Stats()
	if st[0].Stream != "telemetry" || st[1].Stream != "video" {
		t.Fatalf("stats not in priority order: %v, %v", st[0].Stream, st[1].Stream)
	}
	t.Logf("telemetry committed while %d video chunks were still waiting", videoBacklog)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := rep.WaitCaughtUp(wctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Stats() {
		if s.BacklogEvents != 0 {
			t.Fatalf("after WaitCaughtUp %s has %d events behind", s.Stream, s.BacklogEvents)
		}
	}
}

// TestReplicationTelemetryBacklogBeforeVideoBacklog: a telemetry backlog
// (an outage's worth, many small events) drains before a video backlog
// under a shared cap, not one event per chunk of video: each telemetry
// event is its own Uplink.Wait, and the turn must not pass to video
// between two of them while telemetry has more at hand.
func TestReplicationTelemetryBacklogBeforeVideoBacklog(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	store := rigs.OpenStore(t, t.TempDir(), localstream.Options{})
	ctx := testCtx(t, 120*time.Second)
	video, _ := store.CreateStream("video", localstream.StreamConfig{})
	tel, _ := store.CreateStream("telemetry", localstream.StreamConfig{})
	chunk := make([]byte, 32<<10)
	for i := range 100 { // 3.2 MB: 16 s at the cap
		if _, err := video.Append(ctx, localstream.Event{RoutingKey: "v1", Writer: "video/v1", EventTime: int64(i + 1), Flags: localstream.FlagKeyframe, Payload: chunk}); err != nil {
			t.Fatal(err)
		}
	}
	const telEvents = 1500 // with the estimate of 256 bytes each: ~0.7 MB, 3.5 s at the cap
	for i := range telEvents {
		if _, err := tel.Append(ctx, localstream.Event{RoutingKey: fmt.Sprintf("d%d", i%4), Writer: fmt.Sprintf("telemetry/d%d", i%4),
			EventTime: int64(i + 1), Payload: fmt.Appendf(nil, `{"i":%d,"lat":48.85,"lon":2.35,"alt":120.0}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	inst := NewInstanceID()
	sink, err := NewJetStreamSink(connect(t, srv.ClientURL()), "agent-b", inst, JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReplication(store, sink, ReplicationConfig{Instance: inst, UplinkBytesPerSec: 200 << 10, DiscoverInterval: 50 * time.Millisecond})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rep.Run(rctx) }()
	defer func() { cancel(); <-done }()
	var videoLeft uint64
	testkit.WaitFor(t, 100*time.Second, "telemetry committed", func() bool {
		var telLeft uint64 = 1
		for _, s := range rep.Stats() {
			switch s.Stream {
			case "telemetry":
				if s.Events == telEvents {
					telLeft = s.BacklogEvents
				}
			case "video":
				videoLeft = s.BacklogEvents
			}
		}
		return telLeft == 0
	})
	t.Logf("telemetry's backlog of %d events committed with %d of 100 video chunks still waiting", telEvents, videoLeft)
	if videoLeft < 50 {
		t.Errorf("the video backlog got %d of 100 chunks through while telemetry's drained: telemetry waited for video", 100-videoLeft)
	}
}
