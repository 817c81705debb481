package video

import (
	"encoding/base64"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/base"

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
