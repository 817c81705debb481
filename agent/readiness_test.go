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
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replicate"
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

// TestCentreProblem: /readyz's answer from the outage record, at fixed
// times.
func TestCentreProblem(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	cause := "centre unreachable: nothing listens at the central address (connection refused)"
	never := replicate.OutageState{Down: true, Since: t0, NeverConnected: true, Cause: cause}
	if p := centreProblem(never, t0.Add(time.Hour), time.Minute, "u"); p != "central: never reached since the agent started 1h0m0s ago (u): "+cause {
		t.Fatalf("never up: %q", p)
	}
	away := replicate.OutageState{Down: true, Since: t0.Add(2 * time.Second), Cause: cause}
	if p := centreProblem(away, t0.Add(62*time.Second), time.Minute, "u"); p != "" {
		t.Fatalf("away for the bound exactly: %q", p)
	}
	if p := centreProblem(away, t0.Add(63*time.Second), time.Minute, "u"); !strings.Contains(p, "unreachable since 2026-12-07T04:00:02Z (1m1s") || !strings.HasSuffix(p, cause) {
		t.Fatalf("away past the bound: %q", p)
	}
	if p := centreProblem(replicate.OutageState{Since: t0.Add(71 * time.Second)}, t0.Add(2*time.Hour), time.Minute, "u"); p != "" {
		t.Fatalf("back up: %q", p)
	}
	if p := centreProblem(away, t0.Add(3*time.Second), 0, "u"); p == "" {
		t.Fatal("central.unready_after 0: ready while away")
	}
}

// TestCentreAwayOneAnswer (issue 40 item 5): /readyz, /status's uplink,
// its central_connected and its errors answer "is the centre away, and
// since when" from one record through an outage and a return: read in
// the order /status, /readyz, /status, two /status that agree bracket a
// /readyz that agrees with them, and the since-when /readyz names is
// /status's. With central.unready_after 0 /readyz fails as soon as the
// centre is away.
func TestCentreAwayOneAnswer(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	px := testkit.NewProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"), testkit.ProxyHooks{})
	cfg := testConfig(t, t.TempDir(), "tcp://127.0.0.1:1")
	cfg.Telemetry.Enabled, cfg.Video.Enabled = false, false
	cfg.Central.URL = "nats://" + px.Addr()
	cfg.Central.IgnoreDiscoveredServers = true
	cfg.Central.UnreadyAfter = 0
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()
	status := func() Status {
		var s Status
		getJSON(t, base+"/status", &s)
		return s
	}
	away := func(s Status) bool { return s.Uplink.Down }
	// agree reads /status, /readyz, /status until d has passed, and fails
	// on the first answers that disagree; it returns how many reads saw
	// the centre away and how many there.
	agree := func(what string, d time.Duration) (down, up int) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); {
			s1 := status()
			code, body := probe(t, base+"/readyz")
			s2 := status()
			for _, s := range []Status{s1, s2} {
				_, central := s.Errors["central"]
				if away(s) != !s.CentralConnected || away(s) != central {
					t.Fatalf("%s: /status disagrees with itself: uplink down %v, central_connected %v, errors %v",
						what, away(s), s.CentralConnected, s.Errors)
				}
			}
			if away(s1) != away(s2) {
				continue // a change between the reads
			}
			if ready := code == http.StatusOK; ready == away(s1) {
				t.Fatalf("%s: /status says the centre is away: %v (twice, since %v), /readyz %d %q",
					what, away(s1), s1.Uplink.DownSince, code, body)
			}
			if away(s1) {
				since := s1.Uplink.DownSince.UTC().Format(time.RFC3339)
				if s1.Uplink.DownSince != s2.Uplink.DownSince || !strings.Contains(body, "since "+since) {
					t.Fatalf("%s: /status says away since %v and %v, /readyz %q", what, s1.Uplink.DownSince, s2.Uplink.DownSince, body)
				}
				down++
			} else {
				up++
			}
		}
		return down, up
	}
	testkit.WaitFor(t, 20*time.Second, "the centre reached", func() bool { return !away(status()) })
	agree("reached", 500*time.Millisecond)
	px.SetDown(true)
	if px.Cuts() == 0 {
		t.Fatal("the proxy cut no connection: the agent was not connected through it")
	}
	if down, up := agree("going away", 3*time.Second); down == 0 {
		t.Fatalf("the centre never seen away in 3 s (%d reads there)", up)
	}
	px.SetDown(false)
	if down, up := agree("coming back", 3*time.Second); up == 0 {
		t.Fatalf("the centre never seen back in 3 s (%d reads away)", down)
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
