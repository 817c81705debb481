package video

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// recordingProxy forwards TCP connections from a free loopback port to
// target and records what the clients sent.
func recordingProxy(t *testing.T, target string) (addr string, sent *testkit.SyncBuffer) {
	sent = &testkit.SyncBuffer{}
	p := testkit.NewProxy(t, target, testkit.ProxyHooks{Chunk: func(up bool, b []byte) ([]byte, bool) {
		if up {
			sent.Write(b)
		}
		return b, false
	}})
	return p.Addr(), sent
}

// TestRTSPBasicAuth: a real RTSP server that offers basic authentication
// only (gortsplib's server-auth example with its AuthMethods set to
// basic: rtsptest.AuthBasic) is played with the right password — the
// requests on the wire carry "Authorization: Basic", never Digest — and
// refused with a wrong one (401, with what to fix); neither password is
// in the source's state or in the ingest's logs (debug level), where the
// source's URL shows with its password masked.
func TestRTSPBasicAuth(t *testing.T) {
	srv := rtsptest.Start(t, rtsptest.AuthBasic, rtsptest.Options{})
	host := strings.TrimPrefix(srv.URL("", ""), "rtsp://")
	host = strings.TrimSuffix(host, "/")
	proxy, sent := recordingProxy(t, host)
	const wrong = "N0tTheRightPw"
	var logs testkit.SyncBuffer
	in, sink, stop := rtspIngestLog(t, &logs, slog.LevelDebug,
		SourceConfig{URL: "rtsp://" + rtsptest.ReadUser + ":" + rtsptest.ReadPass + "@" + proxy + "/cam", Drone: "basic", Transport: "tcp"},
		SourceConfig{URL: srv.URL(rtsptest.ReadUser+":"+wrong, "cam"), Drone: "basic-wrong"})
	rtsptest.Publish(t, srv.URL(rtsptest.PublishUser+":"+rtsptest.PublishPass, "cam"), rtsptest.H264, 100000, 25, 10)
	srv.WaitCount("RECORD request", 1, 10*time.Second)
	waitSource(t, in, "basic", SourceStreaming, 10*time.Second)
	st := waitSource(t, in, "basic-wrong", SourceFailing, 5*time.Second)
	if !testkit.Until(5*time.Second, func() bool { st = in.Stats().Sources[1]; return strings.Contains(st.LastError, "401") }) {
		t.Fatalf("basic-wrong: %q", st.LastError)
	}
	if !strings.Contains(st.LastError, "check the user and password") {
		t.Errorf("basic-wrong: %q does not say what to fix", st.LastError)
	}
	// A chunk of the good source stored, and the wrong password tried
	// (and logged) again, before the state and the logs are searched.
	testkit.WaitFor(t, 10*time.Second, "a chunk from basic, basic-wrong retried", func() bool {
		return len(byDrone(sink.snapshot())["basic"]) > 0 && in.Stats().Sources[1].Attempts >= 3
	})
	stats := fmt.Sprintf("%+v", in.Stats().Sources)
	stop()
	wire := sent.String()
	if !strings.Contains(wire, "Authorization: Basic ") || strings.Contains(wire, "Digest") {
		t.Errorf("the client did not answer with basic alone:\n%s", wire)
	}
	if n := len(byDrone(sink.snapshot())["basic"]); n == 0 {
		t.Error("no chunk from the basic-auth source")
	}
	out := logs.String()
	for _, pw := range []string{rtsptest.ReadPass, wrong} {
		if strings.Contains(stats, pw) || strings.Contains(out, pw) {
			t.Errorf("the password %q is shown:\nstate %s\nlogs:\n%s", pw, stats, out)
		}
	}
	if !strings.Contains(out, rtsptest.ReadUser+":xxxxx@") {
		t.Errorf("the logs never name the source (nothing for the check to catch):\n%s", out)
	}
}
