package video

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// BenchmarkRTSPSources pulls N RTSP sources of 4 Mbit/s each (the H.264
// capture looped and paced, published by a child process to N of
// gortsplib's example servers, one per source, pulled over TCP) and, in
// the same run, alternately, N pushed RTP drones of 4 Mbit/s each: both
// into a real Store. It reports per way in the receiving process's CPU
// per Mbit/s received, loss (packets the sources or the drones never
// got, and packets lost in sequence), and the ratio of the two costs.
// N is EDGE_RTSP_SOURCES (default 20); each measurement streams
// EDGE_BENCH_SECONDS (default 4).
func BenchmarkRTSPSources(b *testing.B) {
	n := 20
	if v, err := strconv.Atoi(os.Getenv("EDGE_RTSP_SOURCES")); err == nil && v > 0 {
		n = v
	}
	servers := make([]*rtsptest.Server, n)
	urls := make([]string, n)
	for i := range servers {
		servers[i] = rtsptest.Start(b, rtsptest.Plain, rtsptest.Options{NoUDP: true})
		urls[i] = servers[i].URL("", "cam")
	}
	b.Run(fmt.Sprintf("sources=%d", n), func(b *testing.B) {
		var rtspCost, pushedCost float64
		for i := 0; i < b.N; i++ {
			rc := benchRTSPOnce(b, urls)
			pc := benchPushedOnce(b, n)
			rtspCost += rc
			pushedCost += pc
		}
		b.ReportMetric(rtspCost/float64(b.N), "rtsp_cpu%/Mbit/s")
		b.ReportMetric(pushedCost/float64(b.N), "pushed_cpu%/Mbit/s")
		b.ReportMetric(rtspCost/pushedCost, "rtsp/pushed")
		b.ReportMetric(0, "ns/op")
	})
}

// benchStore opens a Store with a video stream in a temp dir.
func benchStore(b *testing.B) (*localstream.Store, *localstream.Stream) {
	return rigs.OpenStream(b, b.TempDir(), localstream.Options{}, "video", localstream.StreamConfig{})
}

// runBenchIngest runs an Ingest of cfg into st until stop is called.
func runBenchIngest(b *testing.B, cfg Config, st *localstream.Stream) (in *Ingest, stop func()) {
	in, err := New(cfg, Sink{Stream: st})
	if err != nil {
		b.Fatal(err)
	}
	run := testkit.Run(b, in.Run, in.Ready())
	return in, func() { run() }
}

// benchRTSPOnce pulls the sources at urls for one measurement and
// returns its CPU % per Mbit/s.
func benchRTSPOnce(b *testing.B, urls []string) float64 {
	store, st := benchStore(b)
	defer store.Close()
	cfg := NewDefaultConfig()
	cfg.Listen, cfg.RTCPListen = "127.0.0.1:0", "mux"
	cfg.SourceReconnectMin, cfg.SourceReconnectMax = 50*time.Millisecond, 200*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	for i, u := range urls {
		cfg.Sources = append(cfg.Sources, SourceConfig{URL: u, Drone: fmt.Sprintf("cam-%d", i), Transport: "tcp"})
	}
	in, stop := runBenchIngest(b, cfg, st)
	// The publishers announce, then wait 2 s: the sources play before
	// the first packet, so every packet sent has a reader.
	sent := make(chan senderResult, 1)
	go func() {
		sent <- runSender(b, senderSpec{RTSP: urls, Mbps: 4, Duration: benchDuration(), Warmup: 2 * time.Second})
	}()
	playing := 0
	if !testkit.Until(20*time.Second, func() bool {
		playing = 0
		for _, s := range in.Stats().Sources {
			if s.State == SourceStreaming {
				playing++
			}
		}
		return playing == len(urls)
	}) {
		b.Fatalf("%d of %d sources playing after 20 s", playing, len(urls))
	}
	c0 := cpuTime()
	res := <-sent
	var s Stats
	testkit.Settle(200*time.Millisecond, 10*time.Second, func() uint64 { s = in.Stats(); return s.Packets })
	cpu := cpuTime() - c0
	stop()
	var rtp uint64
	for _, src := range s.Sources {
		rtp += src.RTP
	}
	mbps := float64(res.Bytes) * 8 / res.Elapsed.Seconds() / 1e6
	rx := mbps * float64(s.Packets) / float64(res.Packets)
	cost := 100 * cpu.Seconds() / res.Elapsed.Seconds() / rx
	b.ReportMetric(rx, "rtsp_rx_Mbit/s")
	b.ReportMetric(100*(1-float64(s.Packets)/float64(res.Packets)), "rtsp_loss%")
	b.Logf("rtsp: %d sources, sent %d RTP, sources got %d, drones got %d (lost %d, queue drops %d), frames %d, cpu %.0f%% for %.1f Mbit/s",
		len(urls), res.Packets, rtp, s.Packets, s.Lost, s.QueueDrops, s.FramesOut, 100*cpu.Seconds()/res.Elapsed.Seconds(), rx)
	return cost
}

// benchPushedOnce sends n pushed drones for one measurement and returns
// its CPU % per Mbit/s.
func benchPushedOnce(b *testing.B, n int) float64 {
	store, st := benchStore(b)
	defer store.Close()
	cfg := NewDefaultConfig()
	cfg.Listen, cfg.RTCPListen, cfg.MaxDrones = "127.0.0.1:0", "mux", 128
	cfg.Logger = slog.New(slog.DiscardHandler)
	in, stop := runBenchIngest(b, cfg, st)
	c0 := cpuTime()
	res := runSender(b, senderSpec{To: in.Addr().String(), Streams: n, Mbps: 4, Duration: benchDuration()})
	s := settledStats(in)
	cpu := cpuTime() - c0
	stop()
	got := s.Packets + s.RTCP
	mbps := float64(res.Bytes) * 8 / res.Elapsed.Seconds() / 1e6
	rx := mbps * float64(got) / float64(res.Packets)
	b.ReportMetric(rx, "pushed_rx_Mbit/s")
	b.ReportMetric(100*(1-float64(got)/float64(res.Packets)), "pushed_loss%")
	b.Logf("pushed: %d drones, sent %d, drones got %d (kernel drops %d, queue drops %d, lost %d), frames %d, cpu %.0f%% for %.1f Mbit/s",
		n, res.Packets, got, s.KernelDrops, s.QueueDrops, s.Lost, s.FramesOut, 100*cpu.Seconds()/res.Elapsed.Seconds(), rx)
	return 100 * cpu.Seconds() / res.Elapsed.Seconds() / rx
}
