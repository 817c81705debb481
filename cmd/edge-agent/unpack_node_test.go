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
	Stream  string `json:"stream"`
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject"`
	// Partition is the subject's agent's partition as the consumer
	// computes it from docs/unpack.md's hash (0 without partitions).
	Partition int               `json:"partition"`
	Headers   map[string]string `json:"headers"`
	// Unknown are the headers the spec's derived-message table does not
	// name (the consumer reads the table from docs/central-format.md).
	Unknown []string `json:"unknown"`
	Data    string   `json:"data"`
}

// TestStockJSConsumerReadsDerivedStream: `edge-agent central` with the
// unpack service and `edge-agent run` (layout 2, the default) as
// processes, drones publishing through Mosquitto; a consumer written
// with the npm nats client alone, started before the run, receives
// every telemetry event of the run once, per drone in order, on
// per-drone subjects with the layout-1 headers and the committed
// watermark, every header named in the table of docs/central-format.md.
// One stream: `central --unpack`, one agent. Three partitions: `central`
// and `central unpack --partitions 3` beside it, an agent in each
// partition (all three take the same drones from the broker), the
// consumer reading EDGEEV_TELEMETRY_P0, _P1 and _P2 side by side.
func TestStockJSConsumerReadsDerivedStream(t *testing.T) {
	jsDir := jsConsumerDir(t)
	t.Run("one stream", func(t *testing.T) { testStockJSConsumer(t, jsDir, 1) })
	t.Run("3 partitions", func(t *testing.T) { testStockJSConsumer(t, jsDir, 3) })
}

// jsAgents are agent ids, one in each of n partitions (js-test alone
// for one).
func jsAgents(n int) []string {
	if n == 1 {
		return []string{"js-test"}
	}
	ids := make([]string, n)
	for k, found := 0, 0; found < n; k++ {
		id := fmt.Sprintf("js-%d", k)
		if i := unpack.PartitionOf(id, n); ids[i] == "" {
			ids[i] = id
			found++
		}
	}
	return ids
}

func testStockJSConsumer(t *testing.T, jsDir string, partitions int) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	dir := t.TempDir()
	centralURL := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	args := []string{"central", "--listen", strings.TrimPrefix(centralURL, "nats://"), "--data-dir", filepath.Join(dir, "central")}
	if partitions == 1 {
		args = append(args, "--unpack")
	}
	cen := agentCommand(ctx, args...)
	if err := cen.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cen.Process.Signal(syscall.SIGTERM); cen.Wait() }()
	var nc *nats.Conn
	if !testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { nc, err = nats.Connect(centralURL); return err == nil }) {
		t.Fatalf("central did not come up: %v", err)
	}
	defer nc.Close()
	if partitions > 1 {
		unp := agentCommand(ctx, "central", "unpack", "--central", centralURL, "--partitions", strconv.Itoa(partitions))
		if err := unp.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { unp.Process.Signal(syscall.SIGTERM); unp.Wait() }()
	}

	spec, err := filepath.Abs("../../docs/central-format.md")
	if err != nil {
		t.Fatal(err)
	}
	parts := unpack.Partitions("telemetry", partitions)
	var streams []string
	for _, p := range parts {
		streams = append(streams, p.StreamName())
	}
	node := exec.Command("node", "consume.mjs", centralURL, strings.Join(streams, ","), spec)
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

	ids := jsAgents(partitions)
	var agents []*exec.Cmd
	var ports []int
	for _, id := range ids {
		httpPort := freePort(t)
		cfgPath := filepath.Join(dir, id+".yaml")
		os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: %s
data_dir: %s
http: {listen: "127.0.0.1:%d"}
store: {min_free_bytes: 16777216}
video: {listen: "127.0.0.1:0", rtcp_listen: mux}
telemetry: {broker: %q}
central: {url: %q, shutdown_timeout: 10s}
devices: {health_interval: 500ms, disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, id, filepath.Join(dir, id), httpPort, brk.URL(), centralURL)), 0o644)
		agents = append(agents, startRun(t, cfgPath, httpPort))
		ports = append(ports, httpPort)
	}
	res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 3, DronePrefix: "drone.", Rate: 40, Duration: 2 * time.Second, NoStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	// The agents' last deliveries from the broker: every message
	// published stored (the checks below compare the centre with the
	// consumer).
	for i, agent := range agents {
		testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool {
			s, err := agentStatus(ports[i])
			return err == nil && s.Telemetry != nil && s.Telemetry.Appended >= res.Published
		})
		agent.Process.Signal(syscall.SIGTERM)
		if err := agent.Wait(); err != nil {
			t.Fatalf("agent %s after SIGTERM: %v", ids[i], err)
		}
	}
	items, err := centralread.ReadAll(ctx, nc, "telemetry", centralread.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The source's events, split as the documented hash splits them.
	src := make([][]wire.CentralEvent, partitions)
	var total int
	for _, it := range items {
		if it.Kind == centralread.ItemEvent {
			i := unpack.PartitionOf(it.Event.Agent, partitions)
			src[i] = append(src[i], it.Event)
			total++
		}
	}
	fmt.Fprintln(stdin, total)
	var got []jsLine
	select {
	case got = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the JS consumer did not finish (%d source events)", total)
	}
	node.Wait()
	if len(got) != total {
		t.Fatalf("JS consumer received %d messages, the source holds %d events", len(got), total)
	}
	byStream := map[string][]jsLine{}
	for _, l := range got {
		byStream[l.Stream] = append(byStream[l.Stream], l)
	}
	seen := map[string]uint64{} // agent/drone → last seq
	for _, p := range parts {
		got := byStream[p.StreamName()]
		if len(got) != len(src[p.Index]) || len(got) == 0 {
			t.Fatalf("%s: JS consumer received %d messages, the source holds %d events of its agents", p, len(got), len(src[p.Index]))
		}
		for i, l := range got {
			s := src[p.Index][i]
			var m mqttsim.Telemetry
			if err := json.Unmarshal([]byte(l.Data), &m); err != nil {
				t.Fatalf("%s message %d: payload %q: %v", p, i, l.Data, err)
			}
			if want := p.EventSubject(s.Agent, s.Record.RoutingKey); l.Subject != want || s.Record.RoutingKey != m.Drone {
				t.Fatalf("%s message %d on %q (drone %q), want %q", p, i, l.Subject, m.Drone, want)
			}
			if l.Partition != p.Index {
				t.Fatalf("%s message %d on %q: the JS consumer's hash puts it in partition %d", p, i, l.Subject, l.Partition)
			}
			key := s.Agent + "/" + m.Drone
			if m.Seq != seen[key]+1 {
				t.Fatalf("%s message %d: agent %s drone %s seq %d after %d (a duplicate, a gap or out of order)", p, i, s.Agent, m.Drone, m.Seq, seen[key])
			}
			seen[key] = m.Seq
			h := l.Headers
			if len(l.Unknown) > 0 {
				t.Fatalf("%s message %d carries headers the table of docs/central-format.md does not name: %v", p, i, l.Unknown)
			}
			if h[wire.HdrOffset] != strconv.FormatUint(s.Record.Offset, 10) || h[wire.HdrSegment] != strconv.FormatUint(uint64(s.Record.Segment), 10) ||
				h[wire.HdrEventTime] != strconv.FormatInt(s.Record.EventTime, 10) || h[wire.HdrContentType] == "" || h[wire.HdrMqttTopic] != "drones/"+m.Drone+"/telemetry" ||
				h[wire.HdrWriter] == "" || h[unpack.HdrWatermarkLower] == "" || h[unpack.HdrWatermarkUpper] == "" || h[unpack.HdrSourceSeq] != strconv.FormatUint(s.Seq, 10) {
				t.Fatalf("%s message %d: headers %v for source event %+v", p, i, h, s.Record.Position)
			}
		}
	}
	for _, id := range ids {
		for d, r := range res.Drones {
			name := strings.TrimSuffix(strings.TrimPrefix(r.Topic, "drones/"), "/telemetry")
			if seen[id+"/"+name] != r.LastSeq {
				t.Fatalf("agent %s drone %s (%s): JS consumer's last seq %d, simulator published up to %d", id, d, name, seen[id+"/"+name], r.LastSeq)
			}
		}
	}
	t.Logf("JS consumer (npm nats 2.29.3): %d events of %d agents × %d drones over %d stream(s) %v, each once, in order", len(got), len(ids), len(res.Drones), len(streams), streams)
}
