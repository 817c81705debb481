package video

import (
	"encoding/base64"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/pion/rtp"

	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestRTSPRedirectLoopIsBounded: a camera that redirects DESCRIBE to
// itself. Each attempt follows at most maxRedirects redirects, then fails
// with an error on the source's status, and the source backs off (issue
// 37 case 8: gortsplib alone follows them without end, about 3,700
// connections in 3 s within one attempt, the source "connecting" with no
// error).
func TestRTSPRedirectLoopIsBounded(t *testing.T) {
	var cam *rtsptest.Camera
	cam = rtsptest.StartCamera(t, "127.0.0.1", rtsptest.RedirectTo(func() string { return cam.URL("", "cam") }))
	in, _, stop := rtspIngest(t, SourceConfig{URL: cam.URL("", "cam"), Drone: "cam", Transport: "tcp"})
	defer stop()
	const attempts = 4
	var st SourceStatus
	if !testkit.Until(10*time.Second, func() bool {
		st = in.Stats().Sources[0]
		return st.Attempts >= attempts && st.State == SourceFailing && len(cam.Of(base.Describe)) > (attempts-1)*(maxRedirects+1)
	}) {
		t.Fatalf("after %d connections to the camera: state %v, %d attempts, last error %q", cam.Conns.Load(), st.State, st.Attempts, st.LastError)
	}
	conns := cam.Conns.Load() // before the attempts: each connection counted belongs to one counted
	st = in.Stats().Sources[0]
	t.Logf("%d connections in %d attempts; last error %q", conns, st.Attempts, st.LastError)
	if conns > int64(st.Attempts)*(maxRedirects+1) {
		t.Fatalf("%d connections in %d attempts, want at most %d an attempt", conns, st.Attempts, maxRedirects+1)
	}
	if !strings.Contains(st.LastError, "too many RTSP redirects") || !strings.Contains(st.LastError, cam.URL("", "cam")) {
		t.Fatalf("last error %q does not say the camera redirects too often, nor where to", st.LastError)
	}
	// The attempts back off: between the first DESCRIBE of the first
	// attempt and that of the fourth (each attempt makes maxRedirects+1)
	// lie at least the first three waits.
	ds := cam.Of(base.Describe)
	least := backoffSum(in.cfg.SourceReconnectMin, in.cfg.SourceReconnectMax, attempts-1)
	if took := ds[(attempts-1)*(maxRedirects+1)].At.Sub(ds[0].At); took < least {
		t.Fatalf("%d attempts within %v: want the backoff's %v", attempts, took, least)
	}
}

// backoffSum is the least time the first n waits of a source's backoff
// take (each failed attempt doubling the wait from least to most).
func backoffSum(least, most time.Duration, n int) (sum time.Duration) {
	for w := least; n > 0; n-- {
		sum += w
		w = min(2*w, most)
	}
	return sum
}

// TestRTSPPlayThenCloseBacksOff: a camera that answers PLAY and closes
// the connection at once. Its sessions never become steady, so the waits
// between them double up to source_reconnect_max, and the source logs the
// flapping once, not each session (issue 37 case 9: the backoff went back
// to its minimum at every PLAY, 63 sessions and 126 log lines in 4 s).
func TestRTSPPlayThenCloseBacksOff(t *testing.T) {
	cam := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.PlayThenClose)
	var logs testkit.SyncBuffer
	in, _, stop := rtspIngestLog(t, &logs, slog.LevelInfo, SourceConfig{URL: cam.URL("", "cam"), Drone: "cam", Transport: "tcp"})
	defer stop()
	const sessions = 8
	least := backoffSum(in.cfg.SourceReconnectMin, in.cfg.SourceReconnectMax, sessions-1)
	var played []rtsptest.Request
	if !testkit.Until(least+10*time.Second, func() bool { played = cam.Of(base.Play); return len(played) >= sessions }) {
		t.Fatalf("%d sessions played", len(played))
	}
	took := played[sessions-1].At.Sub(played[0].At)
	lines := strings.Count(logs.String(), "RTSP source")
	st := in.Stats().Sources[0]
	t.Logf("%d sessions in %v (the backoff's least: %v), %d log lines, state %v, last error %q", sessions, took, least, lines, st.State, st.LastError)
	if took < least {
		t.Fatalf("%d sessions in %v: the backoff went back to its minimum (doubling it takes at least %v)", sessions, took, least)
	}
	if lines > 2 {
		t.Fatalf("%d log lines for %d sessions of a flapping camera, want 2:\n%s", lines, sessions, logs.String())
	}
	if st.LastError == "" {
		t.Fatal("a flapping source shows no error")
	}
}

// TestRTSPCredentialsStayWithTheCamerasHost: two cameras redirect to an
// RTSP server that asks for basic authentication — one to a server on
// another host (127.0.0.2), one to a server on the camera's own host (the
// same 127.0.0.1, another port). The source's user and password go to the
// second, never to the first, which gets its DESCRIBE without them; the
// source's error says why (issue 37 case 11: gortsplib copies the
// credentials to whatever host a redirect names, and answered the other
// host's basic challenge with them in clear).
func TestRTSPCredentialsStayWithTheCamerasHost(t *testing.T) {
	other := rtsptest.StartCamera(t, "127.0.0.2", rtsptest.AsksBasic)
	same := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.AsksBasic)
	cross := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.RedirectTo(func() string { return other.URL("", "cam") }))
	local := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.RedirectTo(func() string { return same.URL("", "cam") }))
	const userinfo = "pilot:s3cret-pw"
	in, _, stop := rtspIngest(t,
		SourceConfig{URL: cross.URL(userinfo, "cam"), Drone: "cross", Transport: "tcp"},
		SourceConfig{URL: local.URL(userinfo, "cam"), Drone: "local", Transport: "tcp"})
	defer stop()
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(userinfo))
	authed := func(c *rtsptest.Camera) (n int) {
		for _, r := range c.Of(base.Describe) {
			if r.Auth != "" {
				n++
			}
		}
		return n
	}
	if !testkit.Until(10*time.Second, func() bool {
		return authed(same) > 0 && len(other.Of(base.Describe)) >= 2 && in.Stats().Sources[0].Attempts >= 2
	}) {
		t.Fatalf("the same host got %d DESCRIBEs with credentials, the other %d DESCRIBEs", authed(same), len(other.Of(base.Describe)))
	}
	for _, r := range other.Requests() {
		if r.Auth != "" {
			t.Fatalf("the other host got the credentials: %s %q", r.Method, r.Auth)
		}
	}
	for _, r := range same.Of(base.Describe) {
		if r.Auth != "" && r.Auth != basic {
			t.Fatalf("the camera's host got %q, want %q", r.Auth, basic)
		}
	}
	st := in.Stats().Sources[0]
	t.Logf("other host: %d DESCRIBEs, none with credentials; camera's host: %d with them; cross source: %q", len(other.Of(base.Describe)), authed(same), st.LastError)
	if !strings.Contains(st.LastError, "401") || !strings.Contains(st.LastError, "sent to 127.0.0.1 only") {
		t.Fatalf("cross source's error %q does not say the credentials were withheld", st.LastError)
	}
}

// TestRTSPErrorClearedWhenStreaming: a source whose stream is not there
// yet fails with 404; once the camera plays and its media has flowed for
// source_reconnect_max, the source's last error is gone from its status
// (issue 40 item 5: a source streaming again still showed its old
// last_error).
func TestRTSPErrorClearedWhenStreaming(t *testing.T) {
	var published atomic.Bool
	cam := rtsptest.StartCamera(t, "127.0.0.1", func(req *base.Request) (*base.Response, bool) {
		if req.Method == base.Describe && !published.Load() {
			return &base.Response{StatusCode: base.StatusNotFound, StatusMessage: "Not Found"}, false
		}
		return rtsptest.Plays(req), false
	})
	cam.Stream(nil)
	in, _, stop := rtspIngest(t, SourceConfig{URL: cam.URL("", "cam"), Drone: "cam", Transport: "tcp"})
	defer stop()
	st := waitSource(t, in, "cam", SourceFailing, 5*time.Second)
	if !strings.Contains(st.LastError, "404") {
		t.Fatalf("before the stream: %q", st.LastError)
	}
	published.Store(true)
	waitSource(t, in, "cam", SourceStreaming, 5*time.Second)
	if !testkit.Until(in.cfg.SourceReconnectMax+5*time.Second, func() bool { st = in.Stats().Sources[0]; return st.LastError == "" }) {
		t.Fatalf("streaming since %v (%d packets), still showing %q", st.Since, st.RTP, st.LastError)
	}
	if st.State != SourceStreaming || st.RTP == 0 {
		t.Fatalf("error cleared but %v with %d packets", st.State, st.RTP)
	}
}

// TestStopStartsNoDroneAgain: an Ingest stopped while a camera streams
// (a frame every 10 ms) and a drone pushes RTP as fast as it can. The
// drones flush after the sources and readers have stopped (pipeline
// order), so a packet that arrives while they stop never starts a drone
// again: one drone per source and run, its frames stored once, in order.
// Before, the drones stopped with the sources and readers (one context):
// a packet read after its drone had left the router started a second
// drone, whose chunks raced the first's to the store (the agent's run of
// every intake at once stored the camera's frame 1690 before 1689).
func TestStopStartsNoDroneAgain(t *testing.T) {
	cam := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.Playing)
	cam.Stream(nil)
	restarted := 0
	const rounds = 10
	for round := range rounds {
		in, sink, stop := rtspIngest(t, SourceConfig{URL: cam.URL("", "cam"), Drone: "cam", Transport: "tcp"})
		conn, err := net.Dial("udp", in.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		pushing := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-pushing:
					return
				default:
				}
				p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: uint16(i), Timestamp: uint32(i) * 3000, SSRC: 0x5eed, Marker: true},
					Payload: rtsptest.FrameNAL(i)}
				b, _ := p.Marshal()
				conn.Write(b)
			}
		})
		testkit.WaitFor(t, 10*time.Second, "frames pulled and pushed", func() bool {
			s := in.Stats()
			return len(s.Sources) == 1 && s.Sources[0].RTP >= 20 && s.PerDrone["ssrc-00005eed"].Packets >= 20
		})
		stop()
		close(pushing)
		wg.Wait()
		conn.Close()
		if n := in.Stats().DronesStarted; n != 2 {
			t.Logf("round %d: %d drones started for a source and a pushing drone", round, n)
			restarted++
		}
		last := map[string]int{}
		for _, ev := range sink.snapshot() {
			c, err := DecodeChunk(ev)
			if err != nil {
				t.Fatal(err)
			}
			off := 0
			for _, f := range c.Frames {
				i, ok := rtsptest.FrameIndex(c.Payload[off : off+f.Size])
				off += f.Size
				prev, seen := last[ev.RoutingKey]
				// The camera's frames come over TCP: every one; pushed
				// ones may be dropped by the kernel: in order, once.
				if !ok || seen && (i <= prev || ev.RoutingKey == "cam" && i != prev+1) {
					t.Fatalf("round %d: %s frame %d (%v) stored after %d", round, ev.RoutingKey, i, ok, prev)
				}
				last[ev.RoutingKey] = i
			}
		}
		if last["cam"] < 19 {
			t.Fatalf("round %d: the camera's frames stored up to %d of 20 or more pulled", round, last["cam"])
		}
	}
	if restarted > 0 {
		t.Fatalf("in %d of %d stops a packet started a drone again", restarted, rounds)
	}
}
