package video

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes and reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// recordingProxy forwards TCP connections from a free loopback port to
// target and records what the clients sent.
func recordingProxy(t *testing.T, target string) (addr string, sent *lockedBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	sent = &lockedBuffer{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				defer s.Close()
				io.Copy(io.MultiWriter(s, sent), c)
			}()
			go func() {
				defer c.Close()
				io.Copy(c, s)
			}()
		}
	}()
	return ln.Addr().String(), sent
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
	var logs lockedBuffer
	in, sink, stop := rtspIngestLog(t, &logs, slog.LevelDebug,
		SourceConfig{URL: "rtsp://" + rtsptest.ReadUser + ":" + rtsptest.ReadPass + "@" + proxy + "/cam", Drone: "basic", Transport: "tcp"},
		SourceConfig{URL: srv.URL(rtsptest.ReadUser+":"+wrong, "cam"), Drone: "basic-wrong"})
	rtsptest.Publish(t, srv.URL(rtsptest.PublishUser+":"+rtsptest.PublishPass, "cam"), rtsptest.H264, 100000, 25, 10)
	srv.WaitCount("RECORD request", 1, 10*time.Second)
	waitSource(t, in, "basic", SourceStreaming, 10*time.Second)
	st := waitSource(t, in, "basic-wrong", SourceFailing, 5*time.Second)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(st.LastError, "401"); st = in.Stats().Sources[1] {
		if time.Now().After(deadline) {
			t.Fatalf("basic-wrong: %q", st.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(st.LastError, "check the user and password") {
		t.Errorf("basic-wrong: %q does not say what to fix", st.LastError)
	}
	time.Sleep(time.Second)
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
