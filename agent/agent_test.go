package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/devices"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/procs"
	"github.com/edge-agent/edge-agent/replicate"
)

// testConfig is an agent on free loopback ports with an embedded central.
func testConfig(t *testing.T, dataDir, brokerURL string) Config {
	cfg := NewDefaultConfig()
	cfg.DataDir = dataDir
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Store.MinFreeBytes = 16 << 20
	cfg.Devices.Disk.Interval = time.Second
	cfg.Devices.Disk.RetainBelow = devices.Threshold{Bytes: 64 << 20}
	cfg.Devices.Disk.ShedBelow = devices.Threshold{Bytes: 32 << 20}
	cfg.Devices.HealthInterval = 200 * time.Millisecond
	cfg.Central.Embedded.Listen = "127.0.0.1:0"
	cfg.Telemetry.Broker = brokerURL
	cfg.Video.Listen = "127.0.0.1:0"
	cfg.Video.RTCPListen = "mux"
	return cfg
}

func startAgent(t *testing.T, cfg Config) (*Agent, context.CancelFunc, <-chan error) {
	t.Helper()
	return startAgentLog(t, cfg, slog.LevelWarn)
}

// startAgentLog runs an agent of cfg, logging to stderr from level, until
// the returned cancel (Run's error comes on done), and waits until it is
// ready.
func startAgentLog(tb testing.TB, cfg Config, level slog.Level) (*Agent, context.CancelFunc, <-chan error) {
	tb.Helper()
	a, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	if err != nil {
		tb.Fatal(err)
	}
	// As `edge-agent run` does (it sizes GOMAXPROCS; a test process's is
	// left alone): /status and /metrics show procs.
	a.ReportProcs(procs.Fixed)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		tb.Fatalf("agent did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		tb.Fatal("agent not ready after 60 s")
	}
	return a, cancel, done
}

// stopOnce returns a stop of an agent running until cancel, whose Run
// returns on done: the first call cancels it and waits for Run, which
// must return nil; later calls do nothing (a test stops the agent to
// read its store, and defers the stop for its early exits).
func stopOnce(tb testing.TB, cancel context.CancelFunc, done <-chan error) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("agent: %v", err)
			}
		})
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}

func streamStatus(s Status, name string) StreamStatus {
	for _, st := range s.Streams {
		if st.Name == name {
			return st
		}
	}
	return StreamStatus{}
}

// TestEndpointsAndRestart runs the agent against a real Mosquitto and an
// embedded JetStream: /status, /metrics and /healthz answer with the
// documented fields while it runs; a graceful stop commits everything;
// a restart keeps the agent id and continues without duplicates.
func TestEndpointsAndRestart(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	if brk.Embedded() {
		t.Log("mosquitto not installed: using the embedded broker")
	}
	dir := t.TempDir()
	cfg := testConfig(t, dir, brk.URL())
	cfg.Central.Embedded.DataDir = filepath.Join(dir, "central")
	a, cancel, done := startAgent(t, cfg)
	base := "http://" + a.HTTPAddr()

	sim, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 50, Duration: 2500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var s Status
	var tm StreamStatus
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool {
		getJSON(t, base+"/status", &s)
		tm = streamStatus(s, "telemetry")
		return tm.Replication != nil && tm.Stats.Appended >= sim.Published && tm.Replication.BacklogEvents == 0 &&
			tm.Replication.Events >= sim.Published && streamStatus(s, "health").Stats.Appended > 0
	}) {
		t.Fatalf("telemetry not replicated (published %d: %+v): %+v\nreplication %+v\ntelemetry %+v", sim.Published, sim.Drones, tm, tm.Replication, s.Telemetry)
	}
	if s.Agent != a.ID() || s.Central == "" || s.Telemetry == nil || s.Telemetry.Appended < sim.Published || s.Video == nil {
		t.Fatalf("status: %+v", s)
	}
	tm = streamStatus(s, "telemetry")
	if tm.LocalWatermark.LowerNs == 0 || tm.Committed["central"] == "" || len(tm.Segments) == 0 || tm.Replication.State == replicate.StateStarting {
		t.Fatalf("telemetry stream status: %+v", tm)
	}
	var dev struct {
		Drones []struct {
			ID     string `json:"id"`
			Online bool   `json:"online"`
		} `json:"drones"`
		Health *struct{} `json:"health"`
		Disk   *struct {
			State string `json:"state"`
		} `json:"disk"`
	}
	b, _ := json.Marshal(s.Devices)
	if err := json.Unmarshal(b, &dev); err != nil || len(dev.Drones) != 2 || dev.Health == nil || dev.Disk == nil || dev.Disk.State != "ok" {
		t.Fatalf("devices status: %s", b)
	}
	metrics := getText(t, base+"/metrics")
	for _, want := range []string{
		`edge_stream_appended_total{stream="telemetry"}`,
		`edge_replication_events_total{stream="telemetry"}`,
		`edge_replication_backlog_events{stream="video"}`,
		`edge_replication_event_time_lag_seconds{stream="telemetry"}`,
		`edge_watermark_local_lag_seconds{stream="telemetry"}`,
		`edge_telemetry_received_total`,
		`edge_telemetry_oversize_total`,
		`edge_video_datagrams_total`,
		`edge_video_malformed_total`,
		`edge_store_free_bytes`,
		`edge_store_disk_full_rejects_total`,
		`edge_store_commits_total`,
		`edge_stream_appended_total{stream="health"}`,
		`edge_devices_drones_events_total{drone="drone-1"}`,
		`edge_devices_disk_free_bytes`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The simulation has ended and everything is committed: the counters
	// served are those /status gave.
	page := parseMetrics(t, metrics)
	for series, want := range map[string]uint64{
		`edge_telemetry_received_total`:                     s.Telemetry.Received,
		`edge_telemetry_appended_total`:                     s.Telemetry.Appended,
		`edge_stream_appended_total{stream="telemetry"}`:    tm.Stats.Appended,
		`edge_replication_events_total{stream="telemetry"}`: tm.Replication.Events,
	} {
		if got, ok := page.samples[series]; !ok || got != float64(want) {
			t.Errorf("/metrics %s = %v (served %v), /status %d", series, got, ok, want)
		}
	}
	if got := getText(t, base+"/healthz"); got != "ok\n" {
		t.Fatalf("/healthz: %q", got)
	}

	// Graceful stop, then restart on the same data directory.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	id := a.ID()
	a2, cancel2, done2 := startAgent(t, cfg)
	defer func() { cancel2(); <-done2 }()
	if a2.ID() != id {
		t.Fatalf("agent id changed across restart: %s → %s", id, a2.ID())
	}
	sim2, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 50, Duration: time.Second, FirstSeq: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool {
		getJSON(t, "http://"+a2.HTTPAddr()+"/status", &s)
		tm = streamStatus(s, "telemetry")
		return tm.Stats.Appended >= sim2.Published && tm.Replication != nil && tm.Replication.BacklogEvents == 0 &&
			tm.Replication.Events >= sim2.Published
	}) {
		t.Fatalf("after restart not replicated: %+v", tm)
	}
	// The centre holds each local telemetry event once.
	nc, err := nats.Connect(a2.CentralURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	items, err := centralread.ReadAll(ctx, nc, "telemetry", centralread.ReadOptions{Agent: id})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[localstream.Position]bool{}
	for _, it := range items {
		if it.Kind != centralread.ItemEvent {
			continue
		}
		if seen[it.Event.Record.Position] {
			t.Fatalf("duplicate at the centre: %v", it.Event.Record.Position)
		}
		seen[it.Event.Record.Position] = true
	}
	if local := streamStatus(s, "telemetry").Stats.Appended; uint64(len(seen)) != sim.Published+sim2.Published {
		t.Fatalf("centre has %d telemetry events, simulators published %d (local this run %d)", len(seen), sim.Published+sim2.Published, local)
	}
}

// TestCentralAwayAtStart: the agent starts and captures while the central
// store is unreachable, and replicates everything once it comes up.
func TestCentralAwayAtStart(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	centralAddr := l.Addr().String()
	l.Close() // nothing listens there yet
	dir := t.TempDir()
	cfg := testConfig(t, dir, brk.URL())
	cfg.Central.URL = "nats://" + centralAddr
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	sim, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 50, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var s Status
	getJSON(t, "http://"+a.HTTPAddr()+"/status", &s)
	if tm := streamStatus(s, "telemetry"); tm.Stats.Appended == 0 || tm.Replication == nil || tm.Replication.Txns != 0 {
		t.Fatalf("while the centre is away: %+v", tm)
	}
	if s.Errors["central"] == "" {
		t.Fatalf("while the centre is away: /status errors %v, want errors.central", s.Errors)
	}
	srv, err := central.New(central.Config{Listen: centralAddr, DataDir: filepath.Join(dir, "central")})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var tm StreamStatus
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		s = Status{} // decoding into a used map would keep its keys
		getJSON(t, "http://"+a.HTTPAddr()+"/status", &s)
		tm = streamStatus(s, "telemetry")
		return tm.Replication != nil && tm.Replication.Events >= sim.Published && tm.Replication.BacklogEvents == 0
	}) {
		t.Fatalf("not replicated after the centre came up: %+v", tm.Replication)
	}
	// The centre's errors are past: not in errors, the replication's last
	// error says when it ended (issue 30.8: they stayed after the reconnect).
	for k, e := range s.Errors {
		if k == "central" || strings.HasPrefix(k, "sync/") {
			t.Errorf("/status errors[%q] = %q after replicating again", k, e)
		}
	}
	if r := streamStatus(s, "telemetry").Replication; r.LastError != "" && r.LastErrorEnded.IsZero() {
		t.Errorf("replication's last error %q not marked as past (last_error_ended)", r.LastError)
	}
}
