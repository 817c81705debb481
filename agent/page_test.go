package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// chromium finds Debian's headless browser (.ci/run installs it).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (apt-get install chromium; .ci/run installs it): the status page is not checked in a browser")
	return ""
}

// artifactDir is where tests keep what a person should look at:
// $TEST_ARTIFACTS, else testdata/artifacts (ignored by git).
func artifactDir(t *testing.T) string {
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("testdata", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStatusPageInBrowser loads the status page from a running agent (real
// Mosquitto, embedded JetStream, simulated drones on `drones/+/telemetry`)
// in headless Chromium and checks what it renders: the agent, the central
// and its state, each stream's counters, each drone, equal to /status; the
// plots hold points and gain more as the page polls. The screenshot is kept
// as a test artifact.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	cfg := testConfig(t, t.TempDir(), brk.URL())
	cfg.Telemetry.Topics = []string{"drones/+/telemetry"}
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()

	sim, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 3, Rate: 100, Count: 40})
	if err != nil {
		t.Fatal(err)
	}
	// Everything captured and replicated: the telemetry numbers stay put.
	var s Status
	var tm StreamStatus
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		getJSON(t, base+"/status", &s)
		tm = streamStatus(s, "telemetry")
		return tm.Stats.Appended == sim.Published && tm.Replication != nil && tm.Replication.Events == sim.Published &&
			tm.Replication.BacklogEvents == 0 && tm.CommittedLagSeconds != nil
	}) {
		t.Fatalf("telemetry not replicated: published %d, status %+v", sim.Published, tm)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// A fail-safe, not a figure: the browser part takes ~10 s; on two
	// cores shared with other test binaries it took 45.
	bctx, tcancel := context.WithTimeout(bctx, 3*time.Minute)
	defer tcancel()
	// Polls wait as long as bctx allows (chromedp's own default gives up
	// after 30 s, whatever bctx says).
	poll := func(pred string) error {
		_, err := chromedp.Run(bctx, chromedp.Poll[bool](pred, chromedp.WithPollingTimeout(0)))
		return err
	}

	type row map[string]string
	type rendered struct {
		Agent, Central, CentralState string
		Procs                        string
		Streams, Drones              map[string]row
		Errors                       []string
		Points                       []int
		Series                       []int
		Canvases                     int
		Seeded                       int
	}
	var page rendered
	const read = `(() => {
	  const rows = (sel, attr) => Object.fromEntries([...document.querySelectorAll(sel)].map(tr =>
	    [tr.getAttribute(attr), Object.fromEntries([...tr.querySelectorAll("td[data-k]")].map(td => [td.dataset.k, td.textContent]))]));
	  const plots = ["plot-lag", "plot-backlog", "plot-uplink"].map(id => document.getElementById(id));
	  return {
	    Agent: document.getElementById("agent").textContent,
	    Central: document.getElementById("central").textContent,
	    CentralState: document.getElementById("central-state").textContent,
	    Procs: document.getElementById("procs-box").hidden ? "" : document.getElementById("procs").textContent,
	    Streams: rows("#streams tbody tr[data-stream]", "data-stream"),
	    Drones: rows("#drones tbody tr[data-drone]", "data-drone"),
	    Errors: [...document.querySelectorAll("#errors li")].map(li => li.textContent),
	    Points: plots.map(p => Number(p.getAttribute("data-points") || 0)),
	    Series: plots.map(p => p.querySelectorAll(".u-legend .u-series").length),
	    Canvases: document.querySelectorAll(".plot canvas").length,
	    Seeded: window.edgePage.seeded,
	  };
	})()`
	// The agent's last minutes, which the page opens on.
	var hist HistoryDoc
	getJSON(t, base+"/status/history", &hist)
	if len(hist.Time) == 0 || len(hist.Streams["telemetry"].BacklogEvents) != len(hist.Time) {
		t.Fatalf("/status/history: %d samples, telemetry %+v", len(hist.Time), hist.Streams["telemetry"])
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/?interval=250"),
		chromedp.WaitVisible(`#streams tbody tr[data-stream="telemetry"]`)); err != nil {
		t.Fatal(err)
	}
	if err := poll(`window.edgePage.polls >= 3`); err != nil {
		t.Fatal(err)
	}
	page, err = chromedp.Run(bctx, chromedp.Evaluate[rendered](read))
	if err != nil {
		t.Fatal(err)
	}
	getJSON(t, base+"/status", &s)

	num := func(txt string) uint64 {
		n, err := strconv.ParseUint(strings.ReplaceAll(txt, ",", ""), 10, 64)
		if err != nil {
			t.Errorf("not a number on the page: %q", txt)
		}
		return n
	}
	if page.Agent != s.Agent || page.Central != s.Central || page.CentralState != "connected" || !s.CentralConnected {
		t.Errorf("header: agent %q central %q %q; /status %q %q connected=%v", page.Agent, page.Central, page.CentralState,
			s.Agent, s.Central, s.CentralConnected)
	}
	if s.Procs == nil || page.Procs != fmt.Sprintf("%d of %d Ps", s.Procs.Procs, s.Procs.MaxProcs) {
		t.Errorf("header: Go %q; /status procs %+v", page.Procs, s.Procs)
	}
	for _, st := range s.Streams {
		r, ok := page.Streams[st.Name]
		if !ok {
			t.Errorf("stream %s not on the page", st.Name)
			continue
		}
		if r["state"] != st.Replication.State.String() {
			t.Errorf("%s: state %q, /status %q", st.Name, r["state"], st.Replication.State)
		}
		if st.Name != "telemetry" {
			continue // health keeps appending while we look
		}
		if num(r["appended"]) != st.Stats.Appended || num(r["replicated"]) != st.Replication.Events ||
			num(r["backlog_events"]) != st.Replication.BacklogEvents || r["backlog_bytes"] != "0 B" {
			t.Errorf("telemetry row %v, /status appended %d replicated %d backlog %d", r, st.Stats.Appended,
				st.Replication.Events, st.Replication.BacklogEvents)
		}
		// A lag is shown in seconds where /status has one, else "–".
		lagShown := func(txt string, lag *float64) bool {
			return (lag == nil && txt == "–") || (lag != nil && strings.HasSuffix(txt, " s"))
		}
		if !lagShown(r["committed_lag"], st.CommittedLagSeconds) || !lagShown(r["local_lag"], st.LocalLagSeconds) {
			t.Errorf("telemetry lags: page %q %q, /status %v %v", r["committed_lag"], r["local_lag"],
				st.CommittedLagSeconds, st.LocalLagSeconds)
		}
	}
	ds := s.Devices.(map[string]any)["drones"].([]any)
	if len(page.Drones) != len(ds) || len(ds) != 3 {
		t.Errorf("page shows %d drones, /status %d, simulated 3", len(page.Drones), len(ds))
	}
	for _, d := range ds {
		d := d.(map[string]any)
		r := page.Drones[d["id"].(string)]
		if r == nil || num(r["events"]) != uint64(d["events"].(float64)) || r["online"] == "" {
			t.Errorf("drone %v: page row %v", d["id"], r)
		}
	}
	if len(s.Errors) == 0 && (len(page.Errors) != 1 || page.Errors[0] != "none") {
		t.Errorf("errors: page %v, /status %v", page.Errors, s.Errors)
	}
	nStreams := len(s.Streams)
	wantSeries := []int{2 * nStreams, nStreams, nStreams + 1} // the uplink plot has a total
	if page.Canvases != 3 || !slices.Equal(page.Series, wantSeries) {
		t.Errorf("plots: %d canvases, legend series %v, want 3 and %v", page.Canvases, page.Series, wantSeries)
	}
	first := page.Points
	if page.Seeded < len(hist.Time) || first[0] < page.Seeded+3 {
		t.Errorf("lag plot has %d points, seeded with %d (history had %d), after 3 polls", first[0], page.Seeded, len(hist.Time))
	}

	// The plots update: more points after more polls, every plot, while
	// the drones fly again (rates and online drones in the screenshot).
	// They fly until the page has been looked at: a drone that lands
	// says "offline" (its status topic), and a page polling slower than
	// a fixed flight (a loaded machine: 9 polls took more than the 6 s
	// the drones flew) never saw all three online with 12 polls.
	flying, land := context.WithCancel(ctx)
	defer land()
	live := make(chan error, 1)
	go func() {
		_, err := mqttsim.Simulate(flying, mqttsim.Config{Broker: brk.URL(), Drones: 3, Rate: 20, Duration: 3 * time.Minute})
		live <- err
	}()
	if err := poll(`window.edgePage.polls >= 12 && document.querySelectorAll("#drones .pill.ok").length == 3`); err != nil {
		t.Fatal(err)
	}
	if page, err = chromedp.Run(bctx, chromedp.Evaluate[rendered](read)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	land()
	for i := range first {
		if page.Points[i] <= first[i] {
			t.Errorf("plot %d did not grow: %d then %d points", i, first[i], page.Points[i])
		}
	}
	if err := <-live; err != nil {
		t.Fatal(err)
	}
	// The uplink's "complete in" with no estimate: during an outage with
	// no cap there is no rate to reckon by, which is not "not catching
	// up" (it said so while the backlog would drain at once); without an
	// outage, capture outpaces the link. Rendered from a status the page
	// is given, in the same script turn as it is read (no poll between).
	etas, err := chromedp.Run(bctx, chromedp.Evaluate[[2]string](`(() => {
	  const up = { sent_bytes: 0, send_bytes_per_sec: 0, cap_bytes_per_sec: 0, backlog_events: 120, backlog_bytes: 24000,
	    backlog_wire_bytes: 2400, down: true, down_since: new Date().toISOString(), down_seconds: 30, cause: "centre unreachable" };
	  const eta = () => document.querySelector('td[data-k="uplink_eta"]').textContent;
	  renderUplink({ uplink: up });
	  const away = eta();
	  renderUplink({ uplink: Object.assign({}, up, { down: false, send_bytes_per_sec: 1000 }) });
	  return [away, eta()];
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(etas[0], "unknown while the centre is away") || etas[1] != "not catching up" {
		t.Errorf("uplink's complete in, no estimate: away with no cap %q, up %q", etas[0], etas[1])
	}
	out := filepath.Join(artifactDir(t), "status-page.png")
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
}

// /debug/pprof is served only with http.pprof: true (--pprof); the page's
// files are there either way.
func TestPprofFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := testConfig(t, t.TempDir(), "tcp://127.0.0.1:1")
		cfg.Telemetry.Enabled, cfg.Video.Enabled, cfg.Central.URL = false, false, ""
		cfg.HTTP.Pprof = on
		a, cancel, done := startAgent(t, cfg)
		base := "http://" + a.HTTPAddr()
		for path, want := range map[string]int{"/": 200, "/app.js": 200, "/vendor/uplot/uPlot.iife.min.js": 200,
			"/debug/pprof/": map[bool]int{false: 404, true: 200}[on], "/debug/pprof/cmdline": map[bool]int{false: 404, true: 200}[on]} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("pprof=%v: GET %s = %d, want %d", on, path, resp.StatusCode, want)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
