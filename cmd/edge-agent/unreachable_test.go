package main

import (
	"net"
	"strings"
	"testing"
)

// TestUnreachableCentreSaysWhy: read, export and cut against a centre that
// is not there say it is unreachable and why (the dial's own error), not
// "nats: outbound buffer limit exceeded" (a publish on a connection that
// never came up).
func TestUnreachableCentreSaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "nats://" + l.Addr().String()
	l.Close()
	for _, args := range [][]string{
		{"read", "--central", dead, "--stream", "telemetry"},
		{"export", "video", "--central", dead, "--drone", "d1", "--from", "0", "--to", "1", "-o", t.TempDir() + "/o.h264"},
		{"cut", "--central", dead, "--at", "1"},
	} {
		code, _, msg := run(t, args...)
		if code != 1 || strings.Contains(msg, "outbound buffer") || !strings.Contains(msg, "unreachable") ||
			!strings.Contains(msg, "connection refused") || !strings.Contains(msg, l.Addr().String()) {
			t.Errorf("%s: exit %d: %s", args[0], code, msg)
		}
	}
}
