package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/procs"
)

// TestRunSizesProcs: `edge-agent run` sizes GOMAXPROCS to the load by
// default — an idle agent runs on one P, /status and /metrics say so —
// and leaves it alone when runtime.procs or GOMAXPROCS fixes it.
func TestRunSizesProcs(t *testing.T) {
	dir := t.TempDir()
	httpPort := freePort(t)
	write := func(extra string) string {
		path := filepath.Join(dir, "agent.yaml")
		os.WriteFile(path, []byte(fmt.Sprintf(`agent_id: procs-test
data_dir: %s
http: {listen: "127.0.0.1:%d"}
log: {level: warn}
video: {enabled: false}
telemetry: {enabled: false}
central: {url: ""}
%s`, filepath.Join(dir, "agent"), httpPort, extra)), 0o644)
		return path
	}
	status := func() procs.Stats {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", httpPort))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			Procs *procs.Stats `json:"procs"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		if s.Procs == nil {
			t.Fatal("/status has no procs")
		}
		return *s.Procs
	}
	stop := func(cmd *exec.Cmd) {
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
	}

	// Sized to the load: an idle agent comes down to one P.
	cmd := startRun(t, write(""), httpPort)
	t.Cleanup(func() { cmd.Process.Kill() })
	var s procs.Stats
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool { s = status(); return s.Procs == 1 }) {
		t.Fatalf("an idle agent runs on %d Ps after 20 s: %+v", s.Procs, s)
	}
	if !s.Sized || s.MinProcs != 1 || s.MaxProcs < 1 {
		t.Fatalf("procs %+v: want sized between 1 and the CPUs", s)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"edge_procs_gomaxprocs 1", "edge_procs_raised_total", "edge_procs_max "} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics has no %q", m)
		}
	}
	stop(cmd)

	// Fixed by the configuration.
	cmd = startRun(t, write("runtime: {procs: 3}\n"), httpPort)
	if s := status(); s.Sized || s.Procs != 3 {
		t.Errorf("runtime.procs 3: %+v", s)
	}
	stop(cmd)

	// Fixed by the environment.
	cmd = agentCommand(context.Background(), "run", "--config", write(""))
	cmd.Env = append(cmd.Env, "GOMAXPROCS=3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, cmd, httpPort)
	if s := status(); s.Sized || s.Procs != 3 {
		t.Errorf("GOMAXPROCS=3: %+v", s)
	}
	stop(cmd)
}
