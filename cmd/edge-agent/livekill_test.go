package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/live"
)

// TestRunLiveLaneThroughKillsAndCuts runs `edge-agent run` with its live
// lane on (the default) behind an uplink capped at 8 kB/s by the agent (the
// cap is charged on the wire since issue 38: compressed packs of JSON
// telemetry take ~20-50 B an event, so the backlog of 10 s at 4 × 25 Hz
// drains over seconds, through the faults):
// drones fly while the link is down, the link returns, and while the
// backlog drains the agent is SIGKILLed and restarted and the link is
// cut. After each fault every drone's live value at the centre is again
// from after it within 10 s (read with `read --live`'s reader); at the end
// every locally stored event is at the centre exactly once.
func TestRunLiveLaneThroughKillsAndCuts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	dir := t.TempDir()
	csrv := rigs.StartCentral(t, central.Config{DataDir: filepath.Join(dir, "central")})
	// The uplink: it goes down (refusing and cutting connections) and cuts.
	link := testkit.NewProxy(t, csrv.ClientURL()[len("nats://"):], testkit.ProxyHooks{})
	httpPort := freePort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: sig-test
data_dir: %s
http: {listen: "127.0.0.1:%d"}
store: {min_free_bytes: 16777216}
video: {enabled: false}
telemetry: {broker: %q}
central: {url: "nats://%s", shutdown_timeout: 30s, uplink_bytes_per_sec: 8000}
devices: {health_interval: 500ms, disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort, brk.URL(), link.Addr())), 0o644)
	reader, err := nats.Connect(csrv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	const drones = 4
	liveAfter := func(t0 time.Time, what string) {
		t.Helper()
		n := 0
		if !testkit.UntilEvery(10*time.Second, 50*time.Millisecond, func() bool {
			vals, _ := live.Read(ctx, reader, live.ReadOptions{Agent: "sig-test", Stream: "telemetry"})
			n = 0
			for _, v := range vals {
				if v.EventTimeNs > t0.UnixNano() {
					n++
				}
			}
			return n == drones
		}) {
			t.Fatalf("after %s: %d of %d drones with a live value from after it", what, n, drones)
		}
	}
	backlog := func() (events uint64) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", httpPort))
		if err != nil {
			return 1
		}
		defer resp.Body.Close()
		var s agent.Status
		if json.NewDecoder(resp.Body).Decode(&s) != nil {
			return 1
		}
		for _, st := range s.Streams {
			if st.Name == "telemetry" && st.CatchUp != nil {
				return st.CatchUp.BacklogEvents
			}
		}
		return 1
	}

	link.SetDown(true)
	cmd := startRun(t, cfgPath, httpPort)
	simCtx, stopSim := context.WithCancel(ctx)
	simDone := make(chan error, 1)
	go func() {
		_, err := mqttsim.Simulate(simCtx, mqttsim.Config{Broker: brk.URL(), Drones: drones, Rate: 25, Duration: 5 * time.Minute})
		simDone <- err
	}()
	time.Sleep(10 * time.Second) // flying while the link is down
	link.SetDown(false)
	liveAfter(time.Now().Add(-2*time.Second), "the link's return")
	kills, inDrain := 0, 0
	for r := range 4 {
		time.Sleep(time.Second) // the faults spaced through the drain
		if backlog() > 20 {
			inDrain++
		}
		at := time.Now()
		if r%2 == 0 {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if !testkit.KilledBySIGKILL(cmd) {
				t.Fatalf("agent was not killed: %v", cmd.ProcessState)
			}
			kills++
			cmd = startRun(t, cfgPath, httpPort)
			liveAfter(at, fmt.Sprintf("SIGKILL %d", kills))
		} else {
			link.Cut()
			liveAfter(at, "a link cut")
		}
	}
	stopSim()
	<-simDone
	t.Logf("%d SIGKILLs, %d link cuts of open connections, %d of 4 faults while the backlog drained", kills, link.Cuts(), inDrain)
	if link.Cuts() < 2 || inDrain < 2 {
		t.Errorf("the faults did not happen as planned (cuts %d, in the drain %d)", link.Cuts(), inDrain)
	}
	if !testkit.UntilEvery(2*time.Minute, 200*time.Millisecond, func() bool { return backlog() == 0 }) {
		t.Fatal("the backlog never drained")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	checkCentre(t, dir, csrv.ClientURL())
}
