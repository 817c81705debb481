package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestMain lets the test binary act as edge-agent (role "agent",
// agentCommand), so tests can run it as a subprocess and signal it.
func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"agent": func() int { main(); return 0 }})
}

// agentCommand is `edge-agent args...` bound to ctx: the test binary run
// again as the agent (TestMain; its own arguments, no test flags), its
// stderr the test's. The caller starts it.
func agentCommand(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = testkit.ChildCommand("agent").Env
	cmd.Stderr = os.Stderr
	return cmd
}

// agentStatus reads the agent's /status on httpPort.
func agentStatus(httpPort int) (agent.Status, error) {
	var s agent.Status
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", httpPort))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRun starts `edge-agent run --config cfg [args]` as a subprocess and
// waits for /healthz.
func startRun(t *testing.T, cfg string, httpPort int, args ...string) *exec.Cmd {
	t.Helper()
	cmd := agentCommand(context.Background(), append([]string{"run", "--config", cfg}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, cmd, httpPort)
	return cmd
}

// waitHealthy waits for the agent's /healthz.
func waitHealthy(t *testing.T, cmd *exec.Cmd, httpPort int) {
	t.Helper()
	if !testkit.UntilEvery(30*time.Second, 20*time.Millisecond, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", httpPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		cmd.Process.Kill()
		t.Fatal("agent did not answer /healthz")
	}
}

// storedRecords reads back the telemetry stream of a stopped agent's store.
func storedRecords(t *testing.T, storeDir string) []localstream.Record {
	t.Helper()
	s, err := localstream.Open(storeDir, localstream.Options{MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream("telemetry")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestRunSignals: SIGTERM stops the agent with exit status 0 after its
// final commit (everything stored locally is at the centre); after a
// SIGKILL mid-flight the next start is clean and the centre still ends
// with every local event exactly once.
func TestRunSignals(t *testing.T) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	dir := t.TempDir()
	csrv := rigs.StartCentral(t, central.Config{DataDir: filepath.Join(dir, "central")})
	httpPort := freePort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: sig-test
data_dir: %s
http: {listen: "127.0.0.1:%d"}
store: {min_free_bytes: 16777216}
video: {listen: "127.0.0.1:0", rtcp_listen: mux}
telemetry: {broker: %q}
central: {url: %q, shutdown_timeout: 10s}
devices: {health_interval: 500ms, disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort, brk.URL(), csrv.ClientURL())), 0o644)

	// 1. SIGTERM after a flight: exit 0, final commit made.
	cmd := startRun(t, cfgPath, httpPort)
	if _, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 50, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v (want exit status 0)", err)
	}
	checkCentre(t, dir, csrv.ClientURL())

	// 2. SIGKILL mid-flight, then a clean start that completes the work.
	cmd = startRun(t, cfgPath, httpPort)
	simDone := make(chan error, 1)
	go func() {
		_, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 100, Duration: 2 * time.Second, FirstSeq: 1000})
		simDone <- err
	}()
	if !testkit.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { // mid-flight, even loaded
		s, err := agentStatus(httpPort)
		return err == nil && s.Telemetry != nil && s.Telemetry.Appended >= 50
	}) {
		t.Fatal("the flight was not being stored after 30 s")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !testkit.KilledBySIGKILL(cmd) {
		t.Fatalf("agent was not killed: %v", cmd.ProcessState)
	}
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	cmd = startRun(t, cfgPath, httpPort)
	time.Sleep(2 * time.Second) // the broker redelivers what the killed agent did not ack
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	checkCentre(t, dir, csrv.ClientURL())
}

// checkCentre compares the stopped agent's local streams with the centre.
func checkCentre(t *testing.T, dir, url string) {
	t.Helper()
	s, err := localstream.Open(filepath.Join(dir, "agent", "store"), localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, st := range s.Streams() {
		recs, err := st.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		local := map[localstream.Position]bool{}
		for _, rec := range recs {
			local[rec.Position] = true
		}
		items, err := centralread.ReadAll(context.Background(), nc, st.Name(), centralread.ReadOptions{Agent: "sig-test"})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[localstream.Position]bool{}
		msgs := map[string]bool{}
		for _, it := range items {
			if it.Kind != centralread.ItemEvent {
				continue
			}
			var m mqttsim.Telemetry
			if st.Name() == "telemetry" && json.Unmarshal(it.Event.Record.Payload, &m) == nil {
				key := fmt.Sprintf("%s/%d", m.Drone, m.Seq)
				if msgs[key] {
					t.Fatalf("telemetry message %s twice at the centre", key)
				}
				msgs[key] = true
			}
			p := it.Event.Record.Position
			if seen[p] || !local[p] {
				t.Fatalf("%s: %v duplicated or unknown at the centre", st.Name(), p)
			}
			seen[p] = true
		}
		if len(seen) != len(local) {
			t.Fatalf("%s: %d events local, %d at the centre after a graceful stop", st.Name(), len(local), len(seen))
		}
		t.Logf("%s: %d events local and at the centre", st.Name(), len(local))
	}
}
