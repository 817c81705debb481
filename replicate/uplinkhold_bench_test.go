package replicate

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// BenchmarkVideoDrainHold is what the uplink's hold (Uplink.WaitMore,
// holdFor: the turn kept 5 ms for a stream with more at hand, added for a
// telemetry backlog behind a video backlog) costs a video-only drain: a
// backlog of video chunks alone under the cap, drained with the hold on
// and off in alternating pairs (the order flips each pair), each its own
// store and agent on one centre. It reports the wall time and the CPU
// time (this process: replication and the embedded centre) of the
// drains with the hold over those without it, for a 2 Mbit/s cap
// (1.25 MB of 32 KB chunks, ~5 s a drain) and a 40 MB/s cap (20 MB, where
// a chunk's bookkeeping would show). One run (b.N is ignored):
//
//	go test -run '^$' -bench VideoDrainHold -benchtime 1x ./replicate
func BenchmarkVideoDrainHold(b *testing.B) {
	pairs := 3
	for _, c := range []struct {
		name   string
		cap    int64
		chunks int
	}{{"2Mbit", 250_000, 40}, {"40MBps", 40_000_000, 640}} {
		b.Run(c.name, func(b *testing.B) {
			srv := rigs.StartCentral(b, central.Config{})
			var wall, cpu [2]time.Duration // [0] hold on, [1] off
			for p := range pairs {
				for k := range 2 {
					off := (p+k)%2 == 1
					w, u := videoDrain(b, srv.ClientURL(), fmt.Sprintf("hold-%s-%d-%d", c.name, p, k), c.cap, c.chunks, off)
					i := 0
					if off {
						i = 1
					}
					wall[i] += w
					cpu[i] += u
					b.Logf("pair %d: hold %v: drain %.2f s, CPU %.2f s", p, !off, w.Seconds(), u.Seconds())
				}
			}
			b.Logf("%s cap, %d pairs: hold on / off: wall %.3f, CPU %.3f (on %.2f s / %.2f s CPU, off %.2f s / %.2f s CPU)",
				c.name, pairs, wall[0].Seconds()/wall[1].Seconds(), cpu[0].Seconds()/cpu[1].Seconds(),
				wall[0].Seconds(), cpu[0].Seconds(), wall[1].Seconds(), cpu[1].Seconds())
			b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "wall-on/off")
			b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "cpu-on/off")
		})
	}
}

// videoDrain appends chunks video chunks of 32 KB to a new store and
// times their replication under a cap of capBps, without the hold when
// off: the wall time to the last commit and the process's CPU time.
func videoDrain(b *testing.B, url, agent string, capBps int64, chunks int, off bool) (wall, cpu time.Duration) {
	store := rigs.OpenStore(b, b.TempDir(), localstream.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	video, err := store.CreateStream("video", localstream.StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 32<<10)
	for i := range chunks {
		if _, err := video.Append(ctx, localstream.Event{RoutingKey: "v1", Writer: "video/v1", EventTime: int64(i + 1), Flags: localstream.FlagKeyframe, Payload: chunk}); err != nil {
			b.Fatal(err)
		}
	}
	inst := NewInstanceID()
	sink, err := NewJetStreamSink(connect(b, url), agent, inst, JetStreamOptions{})
	if err != nil {
		b.Fatal(err)
	}
	saved := holdFor
	if off {
		holdFor = 0
	}
	defer func() { holdFor = saved }()
	rep := NewReplication(store, sink, ReplicationConfig{Instance: inst, UplinkBytesPerSec: capBps, DiscoverInterval: 20 * time.Millisecond})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	cpu0, start := cpuTime(), time.Now()
	go func() { done <- rep.Run(rctx) }()
	defer func() { stop(); <-done }()
	deadline, _ := ctx.Deadline()
	if !testkit.Until(time.Until(deadline), func() bool {
		for _, s := range rep.Stats() {
			if s.Stream == "video" && s.Events == uint64(chunks) && s.BacklogEvents == 0 {
				return true
			}
		}
		return false
	}) {
		b.Fatal("the video backlog never drained")
	}
	return time.Since(start), cpuTime() - cpu0
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
