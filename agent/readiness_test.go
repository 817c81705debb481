package agent

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// probe GETs url and returns its status code and body.
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadyzCentralNeverReached (issue 40 item 4): with a central URL
// nothing answers on, /readyz is 503 naming the URL and the reason while
// /healthz, about the agent itself, stays 200 (capturing locally is
// normal).
func TestReadyzCentralNeverReached(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wrong := "nats://" + l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	cfg := testConfig(t, t.TempDir(), "tcp://127.0.0.1:1")
	cfg.Telemetry.Enabled, cfg.Video.Enabled = false, false
	cfg.Central.URL = wrong
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()
	var code int
	var body string
	if !testkit.Until(10*time.Second, func() bool {
		code, body = probe(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "never reached") && strings.Contains(body, "refused")
	}) {
		t.Fatalf("/readyz %d %q: want 503, the centre never reached and why (connection refused)", code, body)
	}
	t.Logf("/readyz %d %q", code, body)
	if !strings.Contains(body, l.Addr().String()) {
		t.Fatalf("/readyz %q: want the URL", body)
	}
	if code, body := probe(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %q: an unreachable centre is not the agent's ill health", code, body)
	}
}

// TestReadyzCentreAway (issue 40 item 4): once reached, the centre may be
// away for central.unready_after before /readyz fails, with since when;
// /healthz stays 200 throughout, and /readyz is 200 again once it is back.
func TestReadyzCentreAway(t *testing.T) {
	dir := t.TempDir()
	srv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "central")})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	proxy := testkit.NewProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"), testkit.ProxyHooks{})
	cfg := testConfig(t, dir, "tcp://127.0.0.1:1")
	cfg.Telemetry.Enabled, cfg.Video.Enabled = false, false
	cfg.Central.URL = "nats://" + proxy.Addr()
	cfg.Central.IgnoreDiscoveredServers = true
	const bound = 1500 * time.Millisecond
	cfg.Central.UnreadyAfter = bound
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()
	var code int
	var body string
	testkit.WaitFor(t, 20*time.Second, "/readyz 200 with the centre reached", func() bool {
		code, body = probe(t, base+"/readyz")
		return code == http.StatusOK
	})

	proxy.SetDown(true)
	down := time.Now()
	if proxy.Cuts() == 0 {
		t.Fatal("the proxy cut no connection: the agent was not connected through it")
	}
	testkit.WaitFor(t, 20*time.Second, "/readyz 503 with the centre away", func() bool {
		code, body = probe(t, base+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	away := time.Since(down)
	t.Logf("/readyz %d after %s away: %q", code, away.Round(time.Millisecond), body)
	if away < bound {
		t.Fatalf("/readyz failed %s after the centre went away, before central.unready_after %s", away, bound)
	}
	if !strings.Contains(body, "unreachable since") || !strings.Contains(body, "central.unready_after") {
		t.Fatalf("/readyz %q: want since when and the bound", body)
	}
	if code, body := probe(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %q during an outage", code, body)
	}

	proxy.SetDown(false)
	testkit.WaitFor(t, 20*time.Second, "/readyz 200 with the centre back", func() bool {
		code, body = probe(t, base+"/readyz")
		return code == http.StatusOK
	})
}

// TestCentreLinkProblem: the states of the link, at fixed times.
func TestCentreLinkProblem(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	var l centreLink
	if p := l.problem(t0, time.Minute, "u"); !strings.Contains(p, "not watched") {
		t.Fatalf("unwatched: %q", p)
	}
	l.observe(t0, false, io.ErrUnexpectedEOF)
	if p := l.problem(t0.Add(time.Hour), time.Minute, "u"); !strings.Contains(p, "never reached since the agent started 1h0m0s ago (u): unexpected EOF") {
		t.Fatalf("never up: %q", p)
	}
	l.observe(t0.Add(time.Second), true, nil)
	l.observe(t0.Add(2*time.Second), false, nil)
	if p := l.problem(t0.Add(62*time.Second), time.Minute, "u"); p != "" {
		t.Fatalf("away for the bound exactly: %q", p)
	}
	if p := l.problem(t0.Add(63*time.Second), time.Minute, "u"); !strings.Contains(p, "unreachable since 2026-12-07T04:00:02Z (1m1s") {
		t.Fatalf("away past the bound: %q", p)
	}
	l.observe(t0.Add(70*time.Second), false, nil) // still down: the outage keeps its start
	if p := l.problem(t0.Add(70*time.Second), time.Minute, "u"); !strings.Contains(p, "since 2026-12-07T04:00:02Z") {
		t.Fatalf("outage start moved: %q", p)
	}
	l.observe(t0.Add(71*time.Second), true, nil)
	if p := l.problem(t0.Add(2*time.Hour), time.Minute, "u"); p != "" {
		t.Fatalf("back up: %q", p)
	}
}

// TestAliveAsSoonAsReady: the agent is alive for systemd's watchdog from
// the moment it is ready (notify.go sends READY=1 and checks Alive at
// once). Before, the history sampler's first sample could land after
// Ready, and every start under a real systemd could log "systemd:
// watchdog not fed … agent: not sampled yet" at error level
// (.ci/systemd-boot-check saw it).
func TestAliveAsSoonAsReady(t *testing.T) {
	for i := range 10 {
		cfg := testConfig(t, t.TempDir(), "tcp://127.0.0.1:1")
		cfg.Telemetry.Enabled, cfg.Video.Enabled = false, false
		cfg.Central.URL = ""
		a, cancel, done := startAgent(t, cfg)
		err := a.Alive(time.Now())
		cancel()
		<-done
		if err != nil {
			t.Fatalf("start %d: Alive right after Ready: %v", i, err)
		}
	}
}
