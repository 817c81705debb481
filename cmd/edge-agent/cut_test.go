package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
)

// TestCutCommand: usage errors exit 2; against a centre that holds
// nothing yet the cut is printed incomplete (no start sequences) and
// exits 1, also when waiting times out. (Start sequences over a run:
// unpack's TestUnpackLiveAgents.) (The cut over a running agent is proven in the agent's
// TestBadClocksEndToEnd and sync's TestTimeCutProperty.)
func TestCutCommand(t *testing.T) {
	for _, args := range [][]string{
		{"cut"},
		{"cut", "--at", "yesterday"},
		{"cut", "--at", "2026-01-02T15:04:05Z", "--stream", "Bad Name"},
	} {
		if code, _, msg := run(t, args...); code != 2 || msg == "" {
			t.Fatalf("%v: exit %d %q", args, code, msg)
		}
	}
	srv, err := central.New(central.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	at := time.Now().Format(time.RFC3339Nano)
	code, out, msg := run(t, "cut", "--central", srv.ClientURL(), "--at", at, "--agent", "gs-1")
	var c cutOutput
	if err := json.Unmarshal([]byte(out), &c); err != nil || code != 1 || c.Complete || len(c.Streams) != 3 || !strings.Contains(msg, "not complete") ||
		len(c.Starts) != 3 || c.Starts[0].Complete || c.Starts[0].StartSeq != 0 {
		t.Fatalf("empty centre: exit %d %q %q (%v)", code, out, msg, err)
	}
	code, _, msg = run(t, "cut", "--central", srv.ClientURL(), "--at", at, "--wait", "--timeout", "1s", "--stream", "telemetry")
	if code != 1 || !strings.Contains(msg, "not complete after 1s") {
		t.Fatalf("wait with timeout: exit %d %q", code, msg)
	}
}
