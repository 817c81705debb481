package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLimitedLogs(t *testing.T) {
	now := time.Unix(0, 0)
	var buf bytes.Buffer
	log := slog.New(RateLimit(slog.NewTextHandler(&buf, nil), time.Minute, 2, func() time.Time { return now }))
	for range 10 {
		log.Warn("link down", "peer", "central")
		log.Info("routine")
	}
	log.Error("other error")
	out := buf.String()
	if n := strings.Count(out, "link down"); n != 2 {
		t.Fatalf("%d 'link down' lines in the first minute, want 2:\n%s", n, out)
	}
	if strings.Count(out, "routine") != 10 || !strings.Contains(out, "other error") {
		t.Fatalf("info or other messages limited:\n%s", out)
	}
	now = now.Add(time.Minute)
	buf.Reset()
	log.Warn("link down", "peer", "central")
	if !strings.Contains(buf.String(), "suppressed=8") {
		t.Fatalf("next window does not report the suppressed count: %q", buf.String())
	}
}
