package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestLogFormatEveryCommand: the global --log-format json sets the one
// logger of every command, `read` as `run`; values are logged as values
// (no {"IP":…}, null or <nil>, no struct of zeros); a read-only command
// never says it is "capturing locally" (issue 40: JSON on run only, Go
// internals in lines, read logging "capturing locally and retrying").
func TestLogFormatEveryCommand(t *testing.T) {
	checkLines := func(what, text string, final string) int {
		t.Helper()
		n := 0
		for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
			if line == final {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s: not a JSON log line: %s", what, line)
				continue
			}
			n++
			for _, bad := range []string{`"IP":`, `"Zone":`, "null", "<nil>", "capturing locally"} {
				if strings.Contains(line, bad) {
					t.Errorf("%s: %q in %s", what, bad, line)
				}
			}
			if len(line) > 1000 {
				t.Errorf("%s: a %d-byte log line: %.200s…", what, len(line), line)
			}
		}
		return n
	}

	// read, against a centre that is not there: its waiting is logged.
	closed := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	code, out, errOut := run(t, "--log-format", "json", "read", "--central", closed, "--stream", "telemetry")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	final := lines[len(lines)-1]
	if code != 1 || out != "" || !strings.HasPrefix(final, "edge-agent read: ") {
		t.Fatalf("read: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	if n := checkLines("read", errOut, final); n == 0 || !strings.Contains(errOut, `"msg":"central unreachable; retrying"`) {
		t.Errorf("read logged %d JSON lines, none saying the centre is unreachable:\n%s", n, errOut)
	}

	// run, until it is running: the flag before the command beats the
	// file's log.format.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir: %s\nlog: {format: text}\nhttp: {listen: '127.0.0.1:0'}\nstore: {min_free_bytes: 16777216}\n"+
		"video: {listen: '127.0.0.1:0', rtcp_listen: mux}\ntelemetry: {enabled: false}\nmavlink: {enabled: true, udp_listen: '127.0.0.1:0'}\n"+
		"central: {embedded: {listen: '127.0.0.1:0'}}\ndevices: {disk: {retain_below: 64MiB, shed_below: 32MiB}}\n", filepath.Join(dir, "data"))), 0o644)
	var stderr testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"--log-format", "json", "run", "--config", cfg}, &testkit.SyncBuffer{}, &stderr)
	}()
	testkit.WaitFor(t, 60*time.Second, "agent running", func() bool { return strings.Contains(stderr.String(), `"msg":"mavlink: running"`) })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run: exit %d:\n%s", code, stderr.String())
	}
	text := stderr.String()
	if n := checkLines("run", text, ""); n < 4 || !strings.Contains(text, `"video":"127.0.0.1:`) {
		t.Errorf("run logged %d JSON lines:\n%s", n, text)
	}
}
