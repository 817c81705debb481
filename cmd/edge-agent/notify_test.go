package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSystemdNotify (issue 40 item 2): `run` under a Type=notify unit.
// With NOTIFY_SOCKET at a datagram socket this test reads and
// WATCHDOG_USEC set, as systemd starts it, the real agent process sends
// READY=1 once it serves (its HTTP listener answers at that moment), then
// WATCHDOG=1 again and again, and STOPPING=1 at SIGTERM, exiting 0.
func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	httpPort := freePort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: notify-test
data_dir: %s
http: {listen: "127.0.0.1:%d"}
store: {min_free_bytes: 16777216}
video: {listen: "127.0.0.1:0", rtcp_listen: mux}
telemetry: {enabled: false}
central: {url: embedded, embedded: {listen: "127.0.0.1:0"}}
devices: {disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := agentCommand(context.Background(), "run", "--config", cfgPath)
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=300000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	buf := make([]byte, 4096)
	read := func(within time.Duration) string {
		conn.SetReadDeadline(time.Now().Add(within))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification within %s: %v", within, err)
		}
		return string(buf[:n])
	}
	if msg := read(60 * time.Second); msg != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", msg)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", httpPort))
	if err != nil {
		t.Fatalf("READY=1 sent before the agent serves: %v", err)
	}
	resp.Body.Close()
	start := time.Now()
	for i := range 3 {
		if msg := read(10 * time.Second); msg != "WATCHDOG=1" {
			t.Fatalf("notification %d after READY=1: %q, want WATCHDOG=1", i+1, msg)
		}
	}
	t.Logf("READY=1, then 3 × WATCHDOG=1 in %s (WatchdogSec 300ms)", time.Since(start).Round(time.Millisecond))

	cmd.Process.Signal(syscall.SIGTERM)
	stopping := false
	for !stopping {
		msg := read(30 * time.Second)
		stopping = msg == "STOPPING=1"
		if !stopping && msg != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping", msg)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v (want exit status 0)", err)
	}
}
