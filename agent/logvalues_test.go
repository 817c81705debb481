package agent

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
)

// TestLogValues: both formats log an address as its text, leave out a
// nil error, pointer or address, and log a stats struct as its non-zero
// fields (issue 40: `"video":{"IP":…,"Zone":""}`, `<nil>`, 2 KB of
// zero counters at every stop).
func TestLogValues(t *testing.T) {
	var nilErr error
	var nilAddr net.Addr
	var nilTCP *net.TCPAddr
	addr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5004}
	stats := telemetry.Stats{Received: 12, Appended: 11}
	for format, want := range map[string]string{
		"json": `{"level":"INFO","msg":"running","video":"127.0.0.1:5004","stats":{"received":12,"appended":11},"err2":"boom"}`,
		"text": `level=INFO msg=running video=127.0.0.1:5004 stats.received=12 stats.appended=11 err2=boom`,
	} {
		var b bytes.Buffer
		log := NewLogger(LogConfig{Level: "info", Format: format}, &b)
		log.Info("running", "video", addr, "mqtt_listen", nilAddr, "tcp", nilTCP, "err", nilErr, "stats", stats, "empty", []string{}, "err2", errors.New("boom"))
		got := b.String()
		// Drop the time: the rest is the whole line.
		if i := strings.Index(got, `"level"`); format == "json" && i > 0 {
			got = "{" + got[i:]
		} else if i := strings.Index(got, "level="); i > 0 {
			got = got[i:]
		}
		if strings.TrimSpace(got) != want {
			t.Errorf("%s:\n%s\nwant:\n%s", format, got, want)
		}
	}
}
