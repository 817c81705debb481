// Package rtsptest runs real RTSP servers and publishers for tests, none
// of them this project's code: gortsplib's own example servers
// (examples/server, examples/server-auth, examples/server-secure) built
// from the module's source, and ffmpeg publishing lavfi test streams to
// them with libx264 or libx265.
//
// The examples listen on fixed ports (:8554, :8000, :8001). Build copies
// an example's main.go into a scratch module whose go.mod and go.sum are
// this repository's (so the same gortsplib release builds, from the module
// cache) and changes only those address literals to read the environment,
// so that each test's server takes free ports and several run at once.
// AuthBasic is one edit more (see it): server-auth offering basic only.
// The binary is kept in the user's cache directory, keyed by its source.
package rtsptest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The example servers.
const (
	// Plain accepts one publisher and any number of readers.
	Plain = "server"
	// Auth asks publishers for publishuser/publishpass and readers for
	// ReadUser/ReadPass.
	Auth = "server-auth"
	// Secure serves RTSPS only, with server.crt and server.key from its
	// working directory (Start writes them, signed by a CA of its own).
	Secure = "server-secure"
	// AuthBasic is the Auth example offering basic authentication only:
	// its source with one line more, the gortsplib.Server field
	// AuthMethods set to []auth.VerifyMethod{auth.VerifyMethodBasic}
	// (and the import of pkg/auth) — the example offers basic and digest,
	// and a client that can answers digest, so basic alone is exercised
	// only so.
	AuthBasic = "server-auth-basic"
)

// The credentials the Auth example asks of readers and publishers.
const (
	ReadUser, ReadPass       = "readuser", "readpass"
	PublishUser, PublishPass = "publishuser", "publishpass"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Build returns the path of the example's binary, built once per process.
func Build(t testing.TB, example string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p := built[example]; p != "" {
		return p
	}
	gomod := goOut(t, "", "env", "GOMOD")
	modDir := goOut(t, "", "list", "-m", "-f", "{{.Dir}}", "github.com/bluenviron/gortsplib/v4")
	dir := example
	if example == AuthBasic {
		dir = Auth
	}
	src, err := os.ReadFile(filepath.Join(modDir, "examples", dir, "main.go"))
	if err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	s := string(src)
	if example == AuthBasic {
		const field = "\t\tHandler:           h,\n"
		if !strings.Contains(s, field) {
			t.Fatalf("rtsptest: %s: the server's Handler field is not where it was", example)
		}
		s = strings.Replace(s, field, field+"\t\tAuthMethods:       []auth.VerifyMethod{auth.VerifyMethodBasic},\n", 1)
		s = strings.Replace(s, "import (\n", "import (\n\t\"github.com/bluenviron/gortsplib/v4/pkg/auth\"\n", 1)
	}
	for lit, env := range map[string]string{
		`":8554"`: "RTSP_ADDRESS", `":8322"`: "RTSP_ADDRESS",
		`":8000"`: "UDP_RTP_ADDRESS", `":8001"`: "UDP_RTCP_ADDRESS",
		`":8004"`: "UDP_RTP_ADDRESS", `":8005"`: "UDP_RTCP_ADDRESS",
	} {
		s = strings.ReplaceAll(s, lit, `os.Getenv("`+env+`")`)
	}
	if !strings.Contains(s, `os.Getenv("RTSP_ADDRESS")`) {
		t.Fatalf("rtsptest: %s: the listen address literal is not where it was", example)
	}
	if !strings.Contains(s, "\t\"os\"\n") {
		s = strings.Replace(s, "import (\n", "import (\n\t\"os\"\n", 1)
	}
	mod, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := os.ReadFile(filepath.Join(filepath.Dir(gomod), "go.sum"))
	first, rest, _ := strings.Cut(string(mod), "\n")
	if !strings.HasPrefix(first, "module ") {
		t.Fatalf("rtsptest: %s does not start with its module line", gomod)
	}
	// Built once per source (the example, go.mod, go.sum) into the user's
	// cache: later runs reuse the binary, and nothing piles up in /tmp.
	h := sha256.New()
	for _, b := range [][]byte{[]byte(s), mod, sum} {
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "edge-agent-rtsptest", fmt.Sprintf("%s-%x", example, h.Sum(nil)[:8]))
	if _, err := os.Stat(bin); err != nil {
		dir, err := os.MkdirTemp("", "rtsptest-"+example+"-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module rtsptestserver\n"+rest), 0o644)
		os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
		os.WriteFile(filepath.Join(dir, "main.go"), []byte(s), 0o644)
		tmp := filepath.Join(dir, example)
		goOut(t, dir, "build", "-o", tmp, ".")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		// A rename within the cache directory's filesystem is atomic:
		// copy first (the temp dir may be on another filesystem).
		b, err := os.ReadFile(tmp)
		if err != nil {
			t.Fatal(err)
		}
		part := fmt.Sprintf("%s.%d", bin, os.Getpid())
		if err := os.WriteFile(part, b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(part, bin); err != nil {
			t.Fatal(err)
		}
	}
	built[example] = bin
	return bin
}

func goOut(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rtsptest: go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// Server is a running example server. Kill and Start may be called again
// (the same ports): a camera that reboots.
type Server struct {
	t       testing.TB
	bin     string
	dir     string
	env     []string
	scheme  string
	rtsp    int
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	CAFile  string // the CA of a Secure server's certificate (PEM)
	LogPath string // the server's log (stdout and stderr)
}

// Options configure a Server.
type Options struct {
	// NoUDP starts the server without its UDP listeners: it answers a
	// SETUP for UDP with 461 Unsupported Transport.
	NoUDP bool
}

// Start builds (once) and starts an example server on free loopback
// ports; it is killed when the test ends.
func Start(t testing.TB, example string, o Options) *Server {
	t.Helper()
	s := &Server{t: t, bin: Build(t, example), dir: t.TempDir(), scheme: "rtsp", rtsp: FreeTCPPort(t)}
	s.LogPath = filepath.Join(s.dir, "server.log")
	rtp := ""
	rtcp := ""
	if !o.NoUDP {
		p := FreeUDPPair(t)
		rtp, rtcp = fmt.Sprintf("127.0.0.1:%d", p), fmt.Sprintf("127.0.0.1:%d", p+1)
	}
	s.env = append(os.Environ(), fmt.Sprintf("RTSP_ADDRESS=127.0.0.1:%d", s.rtsp), "UDP_RTP_ADDRESS="+rtp, "UDP_RTCP_ADDRESS="+rtcp)
	if example == Secure {
		s.scheme = "rtsps"
		s.CAFile = writeCerts(t, s.dir)
	}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start starts the server again after Kill, on the same ports.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, s.env, log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	addr := fmt.Sprintf("127.0.0.1:%d", s.rtsp)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.LogPath)
			s.t.Fatalf("rtsptest: %s exited at start: %s", s.bin, b)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("rtsptest: %s does not listen on %s", s.bin, addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill kills the server with SIGKILL and waits for it (a no-op when it
// is not running).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Count returns how many lines of the server's log hold what (the
// examples log each request: "RECORD request", "PLAY request", ...).
func (s *Server) Count(what string) int {
	b, _ := os.ReadFile(s.LogPath)
	return strings.Count(string(b), what)
}

// WaitCount waits until the server's log holds what n times.
func (s *Server) WaitCount(what string, n int, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for s.Count(what) < n {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.LogPath)
			s.t.Fatalf("rtsptest: %q %d times in the server's log within %v, want %d:\n%s", what, s.Count(what), within, n, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// URL is the server's URL of path, with userinfo ("user:pass", or "").
func (s *Server) URL(userinfo, path string) string {
	if userinfo != "" {
		userinfo += "@"
	}
	return fmt.Sprintf("%s://%s127.0.0.1:%d/%s", s.scheme, userinfo, s.rtsp, path)
}

// Publisher is ffmpeg publishing a test stream.
type Publisher struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	Frames int
	Log    *bytes.Buffer
}

// Codec names for Publish.
const (
	H264 = "h264"
	H265 = "h265"
)

// Publish starts ffmpeg publishing frames frames of testsrc at fps (in
// real time), a keyframe every gop frames, encoded as codec, over TCP to
// url. It is killed when the test ends.
func Publish(t testing.TB, url, codec string, frames, fps, gop int) *Publisher {
	t.Helper()
	args := []string{"-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi",
		"-i", fmt.Sprintf("testsrc=size=320x240:rate=%d", fps), "-frames:v", strconv.Itoa(frames), "-pix_fmt", "yuv420p"}
	switch codec {
	case H264:
		args = append(args, "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-bf", "0",
			"-g", strconv.Itoa(gop), "-keyint_min", strconv.Itoa(gop))
	case H265:
		args = append(args, "-c:v", "libx265", "-preset", "ultrafast", "-tune", "zerolatency",
			"-x265-params", fmt.Sprintf("keyint=%d:min-keyint=%d:bframes=0:log-level=error", gop, gop))
	default:
		t.Fatalf("rtsptest: codec %q", codec)
	}
	// 1200-byte packets: SRTP (the secure example) adds its tag within the
	// server's 1472-byte packets.
	args = append(args, "-f", "rtsp", "-rtsp_transport", "tcp", "-pkt_size", "1200", url)
	p := &Publisher{Frames: frames, done: make(chan struct{}), Log: &bytes.Buffer{}}
	p.cmd = exec.Command("ffmpeg", args...)
	p.cmd.Stdout, p.cmd.Stderr = p.Log, p.Log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("rtsptest: ffmpeg: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Kill)
	return p
}

// Done is closed when ffmpeg has exited.
func (p *Publisher) Done() <-chan struct{} { return p.done }

// Wait waits for ffmpeg to exit and returns its error.
func (p *Publisher) Wait() error {
	<-p.done
	if p.err != nil {
		return fmt.Errorf("ffmpeg: %w: %s", p.err, p.Log.String())
	}
	return nil
}

// Kill ends ffmpeg (SIGKILL) if it runs.
func (p *Publisher) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// FreeTCPPort returns a loopback TCP port that was free.
func FreeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeUDPPair returns an even loopback UDP port that was free with the
// next one (RTP and RTCP).
func FreeUDPPair(t testing.TB) int {
	t.Helper()
	for range 100 {
		a, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := a.LocalAddr().(*net.UDPAddr).Port
		if p%2 != 0 {
			a.Close()
			continue
		}
		b, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p+1))
		a.Close()
		if err == nil {
			b.Close()
			return p
		}
	}
	t.Fatal("rtsptest: no free UDP port pair")
	return 0
}

// writeCerts writes a CA and server.crt/server.key signed by it for
// 127.0.0.1 into dir, and returns the CA's PEM file.
func writeCerts(t testing.TB, dir string) string {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rtsptest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("server.crt", "CERTIFICATE", der)
	write("server.key", "EC PRIVATE KEY", keyDER)
	return write("ca.crt", "CERTIFICATE", caDER)
}
