package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/unpack"
	"github.com/edge-agent/edge-agent/wire"
)

// jsConsumerDir prepares the npm consumer of testdata/unpack-js (nats
// pinned by its lock file).
func jsConsumerDir(t *testing.T) string {
	return testkit.NPMDir(t, filepath.Join("testdata", "unpack-js"), "nats/package.json", "consume.mjs")
}

// jsLine is one message as consume.mjs prints it.
type jsLine struct {
	Seq     uint64            `json:"seq"`
	Subject string            `json:"subject"`
	Headers map[string]string `json:"headers"`
	// Unknown are the headers the spec's derived-message table does not
	// name (the consumer reads the table from docs/central-format.md).
	Unknown []string `json:"unknown"`
	Data    string   `json:"data"`
}

// TestStockJSConsumerReadsDerivedStream: `edge-agent central --unpack`
// and `edge-agent run` (layout 2, the default) as processes, drones
// publishing through Mosquitto; a consumer written with the npm nats
// client alone, started before the run, receives every telemetry event
// of the run once, per drone in order, on per-drone subjects with the
// layout-1 headers and the committed watermark.
func TestStockJSConsumerReadsDerivedStream(t *testing.T) {
	jsDir := jsConsumerDir(t)
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	dir := t.TempDir()
	centralURL := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	cen := agentCommand(ctx, "central", "--unpack", "--listen", strings.TrimPrefix(centralURL, "nats://"), "--data-dir", filepath.Join(dir, "central"))
	if err := cen.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cen.Process.Signal(syscall.SIGTERM); cen.Wait() }()
	var nc *nats.Conn
	if !testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { nc, err = nats.Connect(centralURL); return err == nil }) {
		t.Fatalf("central did not come up: %v", err)
	}
	defer nc.Close()

	spec, err := filepath.Abs("../../docs/central-format.md")
	if err != nil {
		t.Fatal(err)
	}
	node := exec.Command("node", "consume.mjs", centralURL, unpack.DerivedStreamName("telemetry"), spec)
	node.Dir = jsDir
	node.Stderr = os.Stderr
	stdin, _ := node.StdinPipe()
	stdout, _ := node.StdoutPipe()
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer node.Process.Kill()
	lines := make(chan []jsLine, 1)
	go func() {
		var out []jsLine
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var l jsLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("consumer line %q: %v", sc.Text(), err)
			}
			out = append(out, l)
		}
		lines <- out
	}()

	httpPort := freePort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: js-test
data_dir: %s
http: {listen: "127.0.0.1:%d"}
store: {min_free_bytes: 16777216}
video: {listen: "127.0.0.1:0", rtcp_listen: mux}
telemetry: {broker: %q}
central: {url: %q, shutdown_timeout: 10s}
devices: {health_interval: 500ms, disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort, brk.URL(), centralURL)), 0o644)
	agent := startRun(t, cfgPath, httpPort)
	res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 3, DronePrefix: "drone.", Rate: 40, Duration: 2 * time.Second, NoStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's last deliveries from the broker: every message published
	// stored (the checks below compare the centre with the consumer).
	testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool {
		s, err := agentStatus(httpPort)
		return err == nil && s.Telemetry != nil && s.Telemetry.Appended >= res.Published
	})
	agent.Process.Signal(syscall.SIGTERM)
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent after SIGTERM: %v", err)
	}
	items, err := centralread.ReadAll(ctx, nc, "telemetry", centralread.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var src []wire.CentralEvent
	for _, it := range items {
		if it.Kind == centralread.ItemEvent {
			src = append(src, it.Event)
		}
	}
	fmt.Fprintln(stdin, len(src))
	var got []jsLine
	select {
	case got = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the JS consumer did not finish (%d source events)", len(src))
	}
	node.Wait()
	if len(got) != len(src) {
		t.Fatalf("JS consumer received %d messages, the source holds %d events", len(got), len(src))
	}
	seen := map[string]uint64{} // drone → last seq
	for i, l := range got {
		s := src[i]
		var m mqttsim.Telemetry
		if err := json.Unmarshal([]byte(l.Data), &m); err != nil {
			t.Fatalf("message %d: payload %q: %v", i, l.Data, err)
		}
		if want := unpack.EventSubject("telemetry", "js-test", s.Record.RoutingKey); l.Subject != want || s.Record.RoutingKey != m.Drone {
			t.Fatalf("message %d on %q (drone %q), want %q", i, l.Subject, m.Drone, want)
		}
		if m.Seq != seen[m.Drone]+1 {
			t.Fatalf("message %d: drone %s seq %d after %d (a duplicate, a gap or out of order)", i, m.Drone, m.Seq, seen[m.Drone])
		}
		seen[m.Drone] = m.Seq
		h := l.Headers
		if len(l.Unknown) > 0 {
			t.Fatalf("message %d carries headers the table of docs/central-format.md does not name: %v", i, l.Unknown)
		}
		if h[wire.HdrOffset] != strconv.FormatUint(s.Record.Offset, 10) || h[wire.HdrSegment] != strconv.FormatUint(uint64(s.Record.Segment), 10) ||
			h[wire.HdrEventTime] != strconv.FormatInt(s.Record.EventTime, 10) || h[wire.HdrContentType] == "" || h[wire.HdrMqttTopic] != "drones/"+m.Drone+"/telemetry" ||
			h[wire.HdrWriter] == "" || h[unpack.HdrWatermarkLower] == "" || h[unpack.HdrWatermarkUpper] == "" || h[unpack.HdrSourceSeq] != strconv.FormatUint(s.Seq, 10) {
			t.Fatalf("message %d: headers %v for source event %+v", i, h, s.Record.Position)
		}
	}
	for d, r := range res.Drones {
		name := strings.TrimSuffix(strings.TrimPrefix(r.Topic, "drones/"), "/telemetry")
		if seen[name] != r.LastSeq {
			t.Fatalf("drone %s (%s): JS consumer's last seq %d, simulator published up to %d", d, name, seen[name], r.LastSeq)
		}
	}
	t.Logf("JS consumer (npm nats 2.29.3): %d events of %d drones, each once, in order", len(got), len(seen))
}
