package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
)

// TestReadExportUnknown: against a centre holding two drones' telemetry
// from a real agent, `read` of an unknown drone or stream says so and
// lists what there is (exit 1; issue 40: an unknown drone printed nothing
// with exit 0, an unknown stream a raw "API error code=404"), and an
// export of an unknown drone exits 1 and leaves no file (it left an
// empty one).
func TestReadExportUnknown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	csrv := rigs.StartCentral(t, central.Config{DataDir: filepath.Join(dir, "central")})
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	httpPort := freePort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: unknown-trip
data_dir: %s
http: {listen: "127.0.0.1:%d"}
log: {level: warn}
store: {min_free_bytes: 16777216}
video: {enabled: false}
telemetry: {broker: %q}
central: {url: %q}
devices: {health_interval: 0s, disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort, brk.URL(), csrv.ClientURL())), 0o644)
	cmd := startRun(t, cfgPath, httpPort)
	defer cmd.Process.Kill()
	sim, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 20, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM) // the final commit: everything at the centre
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	drones := slices.Sorted(func(yield func(string) bool) {
		for d := range sim.Drones {
			if !yield(d) {
				return
			}
		}
	})
	url := csrv.ClientURL()

	code, out, errOut := run(t, "read", "--central", url, "--stream", "telemetry", "--drone", "drone-404")
	want := fmt.Sprintf(`edge-agent read: read telemetry: no event of drone "drone-404"; drones there: %s`, strings.Join(drones, ", "))
	if code != 1 || out != "" || strings.TrimSpace(errOut) != want {
		t.Errorf("read --drone drone-404: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errOut, want)
	}
	if code, out, _ := run(t, "read", "--central", url, "--stream", "telemetry", "--drone", drones[0]); code != 0 || !strings.Contains(out, `"type":"event"`) {
		t.Errorf("read --drone %s: exit %d, %d bytes", drones[0], code, len(out))
	}
	code, out, errOut = run(t, "read", "--central", url, "--stream", "telemtry")
	want = `edge-agent read: no stream "telemtry" at the centre; streams there: health, telemetry, video`
	if code != 1 || out != "" || strings.TrimSpace(errOut) != want {
		t.Errorf("read --stream telemtry: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errOut, want)
	}
	for _, args := range [][]string{
		{"export", "video", "--from", "2020-01-01T00:00:00Z", "--to", "2099-01-01T00:00:00Z"},
		{"export", "telemetry", "--format", "tlog"},
	} {
		path := filepath.Join(dir, args[1]+".out")
		code, _, errOut := run(t, append(args, "--central", url, "--drone", "drone-404", "-o", path)...)
		entries, _ := os.ReadDir(dir)
		var left []string
		for _, e := range entries {
			if strings.Contains(e.Name(), ".out") {
				left = append(left, e.Name())
			}
		}
		if code != 1 || len(left) > 0 {
			t.Errorf("%s --drone drone-404: exit %d (%s), files left: %v", strings.Join(args[:2], " "), code, strings.TrimSpace(errOut), left)
		}
	}
}

// TestReadStreamRequired: `read` without --stream says the flag is
// required, as the help says, with exit 2 before connecting (it said
// `--stream: localstream: invalid stream name: "" must match
// ^[a-z][a-z0-9_-]{0,62}$`, naming a package and a regular expression).
func TestReadStreamRequired(t *testing.T) {
	code, _, msg := run(t, "read", "--central", "nats://127.0.0.1:1", "--drone", "drone-1")
	if code != 2 || !strings.Contains(msg, "--stream NAME is required") || strings.Contains(msg, "localstream") {
		t.Fatalf("read without --stream: exit %d, %q", code, msg)
	}
}
