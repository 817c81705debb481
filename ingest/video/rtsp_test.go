package video

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/localstream"
)

// rtspIngest runs an Ingest with sources (pushed RTP on an ephemeral
// port) into a recordSink until the returned stop is called.
func rtspIngest(t *testing.T, sources ...SourceConfig) (*Ingest, *recordSink, func()) {
	t.Helper()
	cfg := NewDefaultConfig()
	cfg.Listen, cfg.RTCPListen = "127.0.0.1:0", "mux"
	cfg.Sources = sources
	cfg.SourceReconnectMin, cfg.SourceReconnectMax = 50*time.Millisecond, 200*time.Millisecond
	cfg.SourceTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sink := &recordSink{}
	in, err := New(cfg, Sink{Stream: sink, Marks: &recordMarks{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	<-in.Ready()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of its ctx ending")
		}
	}
	t.Cleanup(stop)
	return in, sink, stop
}

// waitSource waits until the source of drone is in state.
func waitSource(t *testing.T, in *Ingest, drone string, state SourceState, within time.Duration) SourceStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, s := range in.Stats().Sources {
			if s.Drone == drone && s.State == state {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("source %s not %v within %v: %+v", drone, state, within, in.Stats().Sources)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkPulled checks a pulled drone's chunks: frames in PTS order, each
// once, the first chunk (and only it, plus gaps) flagged discontinuity,
// and ffprobe decodes every stored frame.
func checkPulled(t *testing.T, codec Codec, evs []localstream.Event, wantDisc int) decoded {
	t.Helper()
	got := decodeAll(t, evs)
	if len(got.frames) == 0 {
		t.Fatal("no frames stored")
	}
	for i := 1; i < len(got.frames); i++ {
		if got.frames[i].PTS <= got.frames[i-1].PTS {
			t.Fatalf("frame %d: PTS %d after %d", i, got.frames[i].PTS, got.frames[i-1].PTS)
		}
	}
	disc := 0
	for i, c := range got.chunks {
		if c.Codec != codec {
			t.Fatalf("chunk %d: codec %s, want %s", i, c.Codec, codec)
		}
		if c.Discontinuity {
			disc++
			if !c.Frames[0].Key {
				t.Fatalf("chunk %d: discontinuity without a keyframe first", i)
			}
		}
	}
	if !got.chunks[0].Discontinuity || disc != wantDisc {
		t.Fatalf("%d chunks flagged discontinuity (first %v), want %d", disc, got.chunks[0].Discontinuity, wantDisc)
	}
	ffprobeDecodes(t, codec, got.stream, len(got.frames))
	return got
}

// TestRTSPSourcePullsH264AndH265: gortsplib's example server, ffmpeg
// publishing an H.264 stream to one and an H.265 stream to another; the
// ingest pulls both (UDP with the automatic transport, TCP as
// configured). Every frame from the first keyframe the ingest saw is
// stored once, in order, and decodes.
func TestRTSPSourcePullsH264AndH265(t *testing.T) {
	s264 := rtsptest.Start(t, rtsptest.Plain, rtsptest.Options{})
	s265 := rtsptest.Start(t, rtsptest.Plain, rtsptest.Options{})
	in, sink, stop := rtspIngest(t,
		SourceConfig{URL: s264.URL("", "cam"), Drone: "cam-264"},
		SourceConfig{URL: s265.URL("", "cam"), Drone: "cam-265", Transport: "tcp"})
	const frames, fps, gop = 150, 25, 10
	p264 := rtsptest.Publish(t, s264.URL("", "cam"), rtsptest.H264, frames, fps, gop)
	p265 := rtsptest.Publish(t, s265.URL("", "cam"), rtsptest.H265, frames, fps, gop)
	st := waitSource(t, in, "cam-264", SourceStreaming, 5*time.Second)
	if st.Transport != "UDP" {
		t.Errorf("cam-264 transport %q, want UDP (auto, the server offers it)", st.Transport)
	}
	if st := waitSource(t, in, "cam-265", SourceStreaming, 5*time.Second); st.Transport != "TCP" {
		t.Errorf("cam-265 transport %q, want TCP", st.Transport)
	}
	for _, p := range []*rtsptest.Publisher{p264, p265} {
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	evs := byDrone(sink.snapshot())
	for drone, codec := range map[string]Codec{"cam-264": CodecH264, "cam-265": CodecH265} {
		got := checkPulled(t, codec, evs[drone], 1)
		// The first frames are published before the source plays (the
		// server has no stream before the publisher announces it).
		if len(got.frames) < frames-2*fps {
			t.Errorf("%s: %d of %d frames stored", drone, len(got.frames), frames)
		}
		t.Logf("%s: %d of %d frames stored in %d chunks", drone, len(got.frames), frames, len(got.chunks))
	}
	for _, s := range in.Stats().Sources {
		t.Logf("source %+v", s)
	}
}
