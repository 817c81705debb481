package video

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// rtspIngest runs an Ingest with sources (pushed RTP on an ephemeral
// port) into a recordSink until the returned stop is called.
func rtspIngest(t *testing.T, sources ...SourceConfig) (*Ingest, *recordSink, func()) {
	t.Helper()
	return rtspIngestLog(t, os.Stderr, slog.LevelWarn, sources...)
}

// rtspIngestLog is rtspIngest logging to w from level.
func rtspIngestLog(t *testing.T, w io.Writer, level slog.Level, sources ...SourceConfig) (*Ingest, *recordSink, func()) {
	t.Helper()
	cfg := NewDefaultConfig()
	cfg.Listen, cfg.RTCPListen = "127.0.0.1:0", "mux"
	cfg.Sources = sources
	cfg.SourceReconnectMin, cfg.SourceReconnectMax = 50*time.Millisecond, 200*time.Millisecond
	cfg.SourceTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	sink := &recordSink{}
	in, err := New(cfg, Sink{Stream: sink, Marks: &recordMarks{}})
	if err != nil {
		t.Fatal(err)
	}
	run := testkit.Run(t, in.Run, in.Ready())
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := run(); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	return in, sink, stop
}

// waitSource waits until the source of drone is in state.
func waitSource(t *testing.T, in *Ingest, drone string, state SourceState, within time.Duration) SourceStatus {
	t.Helper()
	var got SourceStatus
	if !testkit.Until(within, func() bool {
		for _, s := range in.Stats().Sources {
			if s.Drone == drone && s.State == state {
				got = s
				return true
			}
		}
		return false
	}) {
		t.Fatalf("source %s not %v within %v: %+v", drone, state, within, in.Stats().Sources)
	}
	return got
}

// sourcesRTP is the RTP packets all the ingest's sources received.
func sourcesRTP(in *Ingest) (n uint64) {
	for _, s := range in.Stats().Sources {
		n += s.RTP
	}
	return n
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
	// Frame times increase, within a chunk and across chunks, except
	// where the first sender report takes over from the arrival-time
	// estimate (an estimated chunk, then one that is not): that chunk may
	// start up to max_clock_jump before the estimated chunk's last frame
	// (docs/video.md, "Event time"; gortsplib's server sends its first
	// report 10 s after the stream started, which a loaded machine's
	// ffmpeg reaches mid-stream).
	maxBack := NewDefaultConfig().MaxClockJump.Nanoseconds()
	i := 0
	for ci, c := range got.chunks {
		for j := range c.Frames {
			if i > 0 {
				prev, cur := got.frames[i-1].PTS, got.frames[i].PTS
				handover := j == 0 && ci > 0 && got.events[ci-1].Flags.Has(localstream.FlagEstimatedTime) &&
					!got.events[ci].Flags.Has(localstream.FlagEstimatedTime)
				if cur <= prev && (!handover || prev-cur >= maxBack) {
					t.Fatalf("frame %d (chunk %d): PTS %d after %d", i, ci, cur, prev)
				}
			}
			i++
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
	// The publishers ended: the frames still on their way arrive (the
	// sources' packet counts hold still).
	testkit.Settle(200*time.Millisecond, 10*time.Second, func() uint64 { return sourcesRTP(in) })
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

// TestRTSPServerRestarts: the RTSP server is killed (SIGKILL) and
// restarted three times mid-stream, each time with a new publisher,
// while a pushed RTP drone streams into the same ingest. Each time the
// source plays again within the backoff bound of the stream's return,
// the first chunk after each gap is flagged (4 discontinuities in all),
// no frame that arrived whole is dropped, and the pushed drone loses
// nothing.
func TestRTSPServerRestarts(t *testing.T) {
	srv := rtsptest.Start(t, rtsptest.Plain, rtsptest.Options{})
	in, sink, stop := rtspIngest(t, SourceConfig{URL: srv.URL("", "cam"), Drone: "cam", Transport: "tcp"})
	bound := in.cfg.SourceReconnectMax + time.Second // the last wait, and the requests of the attempt

	// The pushed drone: a real capture at half speed (12 s) from its own port.
	c := loadCapture(t, "h264", CodecH264)
	type sent struct {
		replay.Summary
		err error
	}
	pushed := make(chan sent, 1)
	go func() {
		sum, err := replay.Send(context.Background(), testdata("h264.pcap"), in.Addr().String(), replay.Options{Speed: 0.5, SSRC: 0x77, Mux: true})
		pushed <- sent{sum, err}
	}()

	const gop = 10
	pub := rtsptest.Publish(t, srv.URL("", "cam"), rtsptest.H264, 100000, 25, gop)
	waitSource(t, in, "cam", SourceStreaming, 10*time.Second)
	const kills = 3
	for k := 1; k <= kills; k++ {
		if !testkit.Until(10*time.Second, func() bool { return in.Stats().PerDrone["cam"].FramesOut >= uint64(30*k) }) {
			t.Fatalf("kill %d: no frames stored", k)
		}
		srv.Kill()
		pub.Kill()
		waitSource(t, in, "cam", SourceFailing, 5*time.Second)
		srv.Start()
		pub = rtsptest.Publish(t, srv.URL("", "cam"), rtsptest.H264, 100000, 25, gop)
		srv.WaitCount("RECORD request", k+1, 10*time.Second)
		back := time.Now()
		st := waitSource(t, in, "cam", SourceStreaming, bound)
		t.Logf("kill %d: streaming again %v after the stream was back (bound %v), %d reconnects", k, time.Since(back).Round(time.Millisecond), bound, st.Reconnects)
		if st.Reconnects != uint64(k) {
			t.Fatalf("kill %d: %d reconnects", k, st.Reconnects)
		}
	}
	// Frames after the last reconnect, and the pushed drone's every
	// packet read (the assertions below say what is missing if not).
	testkit.Until(10*time.Second, func() bool { return in.Stats().PerDrone["cam"].FramesOut >= uint64(30*(kills+1)) })
	sum := <-pushed
	if sum.err != nil {
		t.Fatal(sum.err)
	}
	testkit.Until(10*time.Second, func() bool { return in.Stats().PerDrone["ssrc-00000077"].Packets >= uint64(sum.RTP) })
	stop()
	stats := in.Stats()
	evs := byDrone(sink.snapshot())
	got := checkPulled(t, CodecH264, evs["cam"], 1+kills)
	ds := stats.PerDrone["cam"]
	t.Logf("cam: %d frames stored, %d skipped before a keyframe after a join, %d dropped (cut by a kill), %d packets", len(got.frames), ds.FramesSkipped, ds.FramesDropped, ds.Packets)
	if ds.Lost != 0 || ds.QueueDrops != 0 || ds.FramesDropped > kills || ds.FramesOut != uint64(len(got.frames)) || ds.Packets != stats.Sources[0].RTP {
		t.Fatalf("cam: frames that arrived were lost: %+v (source %+v)", ds, stats.Sources[0])
	}
	// The pushed drone is untouched by the restarts.
	pd := decodeAll(t, evs["ssrc-00000077"])
	ps := stats.PerDrone["ssrc-00000077"]
	if len(pd.frames) != len(c.frames) || ps.Lost != 0 || ps.Discontinuities != 1 || ps.QueueDrops != 0 {
		t.Fatalf("pushed drone: %d of %d frames, %+v", len(pd.frames), len(c.frames), ps)
	}
}

// TestRTSPWrongCredentialsAndSilentServer: a source with a wrong
// password and one whose server accepts the connection and never answers
// fail with errors that say so (the password never in them), while a
// third source streams, and a fourth plays from the authenticating server
// with the right password; the ingest stops at once however the failing
// sources are stuck.
func TestRTSPWrongCredentialsAndSilentServer(t *testing.T) {
	auth := rtsptest.Start(t, rtsptest.Auth, rtsptest.Options{})
	plain := rtsptest.Start(t, rtsptest.Plain, rtsptest.Options{})
	silent := testkit.SilentServer(t) // reads the requests, answers nothing
	const secret = "Sup3rSecretPw"
	in, sink, stop := rtspIngest(t,
		SourceConfig{URL: auth.URL(rtsptest.ReadUser+":"+secret, "cam"), Drone: "wrong-pw"},
		SourceConfig{URL: "rtsp://u:" + secret + "@" + silent + "/cam", Drone: "silent"},
		SourceConfig{URL: plain.URL("", "cam"), Drone: "good"},
		SourceConfig{URL: auth.URL(rtsptest.ReadUser+":"+rtsptest.ReadPass, "cam"), Drone: "right-pw"})
	pub := rtsptest.Publish(t, auth.URL(rtsptest.PublishUser+":"+rtsptest.PublishPass, "cam"), rtsptest.H264, 100000, 25, 10)
	rtsptest.Publish(t, plain.URL("", "cam"), rtsptest.H264, 100000, 25, 10)
	auth.WaitCount("RECORD request", 1, 10*time.Second)
	st := waitSource(t, in, "wrong-pw", SourceFailing, 5*time.Second)
	if !testkit.Until(5*time.Second, func() bool { st = in.Stats().Sources[0]; return strings.Contains(st.LastError, "401") }) {
		t.Fatalf("wrong-pw: %q", st.LastError)
	}
	if !strings.Contains(st.LastError, "check the user and password") {
		t.Errorf("wrong-pw: %q does not say what to fix", st.LastError)
	}
	sl := waitSource(t, in, "silent", SourceFailing, 2*in.cfg.SourceTimeout+time.Second)
	if !strings.Contains(sl.LastError, "no answer within") {
		t.Errorf("silent: %q", sl.LastError)
	}
	waitSource(t, in, "good", SourceStreaming, 5*time.Second)
	// The same server plays with the right password (digest: the
	// example offers basic and digest, gortsplib's client answers digest).
	waitSource(t, in, "right-pw", SourceStreaming, 5*time.Second)
	// Chunks from the playing sources, and the failing ones tried again
	// with the password, before the state is searched for it.
	testkit.WaitFor(t, 10*time.Second, "chunks from good and right-pw, wrong-pw and silent retried", func() bool {
		evs, ss := byDrone(sink.snapshot()), in.Stats().Sources
		return len(evs["good"]) > 0 && len(evs["right-pw"]) > 0 && ss[0].Attempts >= 3 && ss[1].Attempts >= 2
	})
	for _, s := range in.Stats().Sources {
		if strings.Contains(fmt.Sprint(s), secret) {
			t.Errorf("the password is shown: %+v", s)
		}
	}
	_ = pub
	began := time.Now()
	stop()
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("Run took %v to stop with a source stuck on a silent server", d)
	}
	if evs := byDrone(sink.snapshot()); len(evs["good"]) == 0 || len(evs["right-pw"]) == 0 || len(evs["wrong-pw"]) != 0 || len(evs["silent"]) != 0 {
		t.Fatalf("chunks: good %d, right-pw %d, wrong-pw %d, silent %d", len(evs["good"]), len(evs["right-pw"]), len(evs["wrong-pw"]), len(evs["silent"]))
	}
}

// TestRTSPTransportFallbackAndTLS: with the automatic transport a
// server without UDP is played over TCP (after its 461), and an rtsps://
// server whose certificate chains to the configured CA is played; the
// same server without the CA is refused (unknown authority).
func TestRTSPTransportFallbackAndTLS(t *testing.T) {
	noUDP := rtsptest.Start(t, rtsptest.Plain, rtsptest.Options{NoUDP: true})
	in, sink, stop := rtspIngest(t, SourceConfig{URL: noUDP.URL("", "cam"), Drone: "fallback"})
	rtsptest.Publish(t, noUDP.URL("", "cam"), rtsptest.H264, 50, 25, 10)
	st := waitSource(t, in, "fallback", SourceStreaming, 10*time.Second)
	testkit.WaitFor(t, 10*time.Second, "a chunk from fallback", func() bool { return len(sink.snapshot()) > 0 })
	stop()
	if st = in.Stats().Sources[0]; st.Transport != "TCP" || st.TransportSwitches == 0 {
		t.Errorf("fallback: transport %q after %d switches", st.Transport, st.TransportSwitches)
	}
	if len(sink.snapshot()) == 0 {
		t.Error("fallback: no chunk")
	}

	sec := rtsptest.Start(t, rtsptest.Secure, rtsptest.Options{})
	in, sink, stop = rtspIngest(t,
		SourceConfig{URL: sec.URL("", "cam"), Drone: "tls", CAFile: sec.CAFile},
		SourceConfig{URL: sec.URL("", "cam"), Drone: "tls-tcp", CAFile: sec.CAFile, Transport: "tcp"},
		SourceConfig{URL: sec.URL("", "cam"), Drone: "no-ca"})
	rtsptest.Publish(t, sec.URL("", "cam"), rtsptest.H264, 100000, 25, 10)
	waitSource(t, in, "tls", SourceStreaming, 10*time.Second)
	waitSource(t, in, "tls-tcp", SourceStreaming, 10*time.Second)
	testkit.WaitFor(t, 10*time.Second, "chunks from tls and tls-tcp, no-ca refused", func() bool {
		evs := byDrone(sink.snapshot())
		return len(evs["tls"]) > 0 && len(evs["tls-tcp"]) > 0 && strings.Contains(in.Stats().Sources[2].LastError, "unknown authority")
	})
	stop()
	evs := byDrone(sink.snapshot())
	for _, d := range []string{"tls", "tls-tcp"} {
		checkPulled(t, CodecH264, evs[d], 1)
	}
	if st := in.Stats().Sources[2]; st.State != SourceFailing || !strings.Contains(st.LastError, "certificate signed by unknown authority") || len(evs["no-ca"]) != 0 {
		t.Errorf("no-ca: %v %q, %d chunks", st.State, st.LastError, len(evs["no-ca"]))
	}
}
