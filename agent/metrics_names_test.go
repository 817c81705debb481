package agent

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/replay"
)

// TestMetricsPromtool runs an agent with every part (MQTT telemetry from
// a real Mosquitto, RTP video, an RTSP source, MAVLink over TCP, host
// health, disk pressure, the live lane, an embedded central), feeds each,
// and checks its /metrics with Prometheus's own linter, promtool check
// metrics (Debian's prometheus package), and with the naming rules
// (checkMetricRules) that hold without promtool. Issue 40: 11 naming
// problems, levels exported as counters, a drop count as a gauge, every
// help the metric's name, no build info.
func TestMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (apt-get install prometheus; .ci/run does): %v", err)
	}
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	dir := t.TempDir()
	cfg := testConfig(t, dir, brk.URL())
	cfg.Central.Embedded.DataDir = filepath.Join(dir, "central")
	cfg.MAVLink.Enabled = true
	cfg.MAVLink.UDPListen, cfg.MAVLink.TCPListen = "", "127.0.0.1:0"
	cfg.Video.Sources = []video.SourceConfig{{URL: "rtsp://" + testkit.SilentServer(t) + "/cam", Drone: "cam-1"}}
	cfg.Video.SourceTimeout = time.Second
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()

	if _, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 50, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := mavlink.Simulate(ctx, mavlink.SimConfig{To: "tcp://" + a.MAVLinkTCPAddr().String(), Drones: 1, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	capture, err := filepath.Abs(filepath.Join("..", "testdata", "h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replay.Send(ctx, capture, a.VideoAddr().String(), replay.Options{Speed: 0, Mux: true, Live: true}); err != nil {
		t.Fatal(err)
	}
	var s Status
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool {
		getJSON(t, base+"/status", &s)
		tm := streamStatus(s, "telemetry")
		return tm.Replication != nil && tm.Replication.Events > 0 && s.Video != nil && len(s.Video.PerDrone) > 0 &&
			s.MAVLink != nil && s.MAVLink.Stored > 0 && s.Live != nil && streamStatus(s, "health").Stats.Appended > 0
	}) {
		t.Fatalf("not every part fed: %+v", s)
	}
	text := getText(t, base+"/metrics")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	n := checkMetricRules(t, text)
	checkRenamesDocumented(t, a)
	if n < 250 {
		t.Errorf("only %d edge_ metrics served: not every part ran", n)
	}
	for _, want := range []string{`edge_video_per_drone_frames_out_total{drone="`, `edge_mavlink_stored_total`, `edge_video_sources_state{drone="cam-1"}`,
		`edge_devices_health_mem_available_bytes`, `edge_devices_health_cpu_ratio`, `edge_video_queue_drops_total`,
		`edge_replication_watermark_lower_timestamp_seconds{stream="telemetry"}`, `edge_catch_up_send_bytes_per_second{stream="telemetry"}`} {
		if !strings.Contains(text, "\n"+want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// checkMetricRules checks a /metrics page against the naming rules and
// returns how many edge_ metrics it has: promlint (promtool's checks as
// a library); counters end in _total and nothing else does; no
// abbreviated or non-base unit (_ns, _s, _ms, _per_sec, _percent); help
// that says more than the name; edge_agent_build_info is 1.
func checkMetricRules(t *testing.T, text string) int {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	typ, help := map[string]string{}, map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 && f[1] == "TYPE" {
			typ[f[2]] = f[3]
		} else if len(f) >= 3 && f[1] == "HELP" {
			help[f[2]], _ = strings.CutPrefix(line, "# HELP "+f[2]+" ")
		}
	}
	badUnit := regexp.MustCompile(`_(ns|us|ms|s|per_sec|percent|pct|count|kb|mb)(_total)?$`)
	n := 0
	for name, ty := range typ {
		if !strings.HasPrefix(name, "edge_") {
			continue
		}
		n++
		if (ty == "counter") != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %s: counters, and only they, end in _total", name, ty)
		}
		if badUnit.MatchString(name) {
			t.Errorf("%s: name a base unit (_seconds, _bytes, _ratio, _per_second)", name)
		}
		h := help[name]
		if len(h) < 15 || strings.Contains(h, name) || strings.Contains(h, "docs/metrics.md") {
			t.Errorf("%s: help %q does not say what it measures", name, h)
		}
	}
	if !regexp.MustCompile(`(?m)^edge_agent_build_info\{.*revision=.*\} 1$`).MatchString(text) {
		t.Error("no edge_agent_build_info 1")
	}
	return n
}

// TestMetricName: the renaming rules on their own.
func TestMetricName(t *testing.T) {
	c, g := prometheus.CounterValue, prometheus.GaugeValue
	for _, tc := range []struct {
		in    string
		t     prometheus.ValueType
		want  string
		wantT prometheus.ValueType
		scale float64
	}{
		{"edge_stream_appended", c, "edge_stream_appended_total", c, 1},
		{"edge_replication_watermark_lower_ns", g, "edge_replication_watermark_lower_timestamp_seconds", g, 1e-9},
		{"edge_mavlink_drones_vehicle_position_unix_ns", g, "edge_mavlink_drones_vehicle_position_timestamp_seconds", g, 1e-9},
		{"edge_devices_health_mem_used_percent", g, "edge_devices_health_mem_used_ratio", g, 0.01},
		{"edge_catch_up_send_bytes_per_sec", g, "edge_catch_up_send_bytes_per_second", g, 1},
		{"edge_devices_health_mem_available", c, "edge_devices_health_mem_available_bytes", g, 1},
		{"edge_devices_health_uptime_s", c, "edge_devices_health_uptime_seconds", g, 1},
		{"edge_devices_health_time_ns", g, "edge_devices_health_sample_timestamp_seconds", g, 1e-9},
		{"edge_video_queue_drops", g, "edge_video_queue_drops_total", c, 1},
		{"edge_mavlink_drones_vehicle_battery_pct", g, "edge_mavlink_drones_vehicle_battery_ratio", g, 0.01},
		{"edge_mavlink_drones_vehicle_alt_m", g, "edge_mavlink_drones_vehicle_alt_meters", g, 1},
	} {
		name, ty, scale := metricName(tc.in, tc.t)
		if name != tc.want || ty != tc.wantT || scale != tc.scale {
			t.Errorf("%s: %s %v ×%g, want %s %v ×%g", tc.in, name, ty, scale, tc.want, tc.wantT, tc.scale)
		}
	}
}

// checkRenamesDocumented: every metric whose name changed with issue 40
// is in docs/metrics.md's table of old and new names, for operators
// moving dashboards and alerts.
func checkRenamesDocumented(t *testing.T, a *Agent) {
	t.Helper()
	out := make(chan prometheus.Metric, 1<<16)
	e := &emitter{out: out, seen: map[string]bool{}, renamed: map[string]string{}}
	(&statusCollector{a: a}).collect(e)
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range slices.Sorted(maps.Keys(e.renamed)) {
		if row := fmt.Sprintf("| `%s` | `%s` |", e.renamed[n], n); !strings.Contains(string(doc), row) {
			missing = append(missing, row)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/metrics.md lacks the renames:\n%s", strings.Join(missing, "\n"))
	}
}
