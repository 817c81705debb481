package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestHTTPSlowloris: 200 local connections that send a request's headers
// a few bytes at a time and never finish them, reopened as soon as the
// server closes them, while a liveness probe asks /healthz every 100 ms
// on a new connection with a 2 s timeout: every probe is answered (the
// new connection evicts the longest-waiting unfinished one; with a limit
// that makes new connections wait, the probe queued behind the attack
// until the header timeout cut it loose).
func TestHTTPSlowloris(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer srv.Close()
	addr := ln.Addr().String()
	stop := make(chan struct{})
	var opened atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the attacker's back-off
					continue
				}
				opened.Add(1)
				// A byte of header every 200 ms until the server closes.
				for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ") {
					if _, err := c.Write([]byte{b}); err != nil {
						break
					}
					select {
					case <-stop:
					case <-time.After(200 * time.Millisecond):
						continue
					}
					break
				}
				c.Close()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	testkit.Until(10*time.Second, func() bool { return opened.Load() >= 200 }) // the attack at full strength, or as strong as it got
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	failed := 0
	const probes = 60
	for i := 0; i < probes; i++ {
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			failed++
			t.Logf("probe %d: %v", i, err)
		} else {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				failed++
			}
		}
		time.Sleep(100 * time.Millisecond) // the probe's period, as a liveness probe's
	}
	t.Logf("%d attack connections opened; %d of %d probes failed", opened.Load(), failed, probes)
	if failed > 0 {
		t.Fatalf("%d of %d /healthz probes unanswered under the slowloris", failed, probes)
	}
}

// TestHTTPGuards: a request naming another host (DNS rebinding) is
// refused on every path, IP addresses, localhost and http.hosts are
// served; the page carries CSP, X-Frame-Options and nosniff; pprof
// answers GET only; binding pprof and the MQTT listener to every
// interface is warned of at start.
func TestHTTPGuards(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), "")
	cfg.Telemetry.Broker = ""
	cfg.Telemetry.Listen = "0.0.0.0:0"
	cfg.Central.URL = ""
	cfg.HTTP.Listen = "0.0.0.0:0"
	cfg.HTTP.Pprof = true
	cfg.HTTP.Hosts = []string{"Ground-7.local"}
	var logs testkit.SyncBuffer
	a, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(a.HTTPAddr())
	do := func(method, path, host string) (*http.Response, string) {
		req, _ := http.NewRequest(method, "http://127.0.0.1:"+port+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, p := range []string{"/", "/status", "/metrics", "/healthz", "/app.js", "/debug/pprof/", "/debug/pprof/cmdline"} {
		for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example"} {
			if resp, body := do("GET", p, host); resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %s: %d %.80q", p, host, resp.StatusCode, body)
			}
		}
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "10.1.2.3", "ground-7.local.", "app.localhost"} {
			if resp, _ := do("GET", p, host); resp.StatusCode != 200 && !(p == "/healthz" && resp.StatusCode == 503) {
				t.Errorf("GET %s with Host %s: %d", p, host, resp.StatusCode)
			}
		}
	}
	resp, _ := do("GET", "/", "localhost")
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/heap"} {
			if resp, _ := do(m, p, "localhost"); resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, p, resp.StatusCode)
			}
		}
	}
	for _, w := range []string{"/debug/pprof is served on every interface", "the MQTT listener takes any client on every interface"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("no warning %q at start:\n%s", w, logs.String())
		}
	}
}
