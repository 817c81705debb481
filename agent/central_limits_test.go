package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/wire"
)

// TestHealthzFailsWhileAStreamCannotReplicate (issue 10): a stream whose
// replication stopped (here: the central stream exists without atomic
// publish, a permanent error) is a /healthz failure with the reason, and
// an /status error; it never stops silently.
func TestHealthzFailsWhileAStreamCannotReplicate(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	srv, err := central.New(central.Config{Listen: addr, DataDir: filepath.Join(dir, "central")})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancelCtx := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCtx()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamName("health"), Subjects: []string{"edge.health.>"}}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dir, "tcp://127.0.0.1:1")
	cfg.Telemetry.Enabled, cfg.Video.Enabled = false, false
	cfg.Central.URL = srv.ClientURL()
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()
	var status string
	var body []byte
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		status = resp.Status
		return resp.StatusCode == http.StatusServiceUnavailable
	}) {
		t.Fatalf("/healthz still %s %q with the health stream unable to replicate", status, body)
	}
	if !strings.Contains(string(body), "health") || !strings.Contains(string(body), "atomic") {
		t.Fatalf("/healthz 503 without the stream and reason: %q", body)
	}
	var s Status
	getJSON(t, base+"/status", &s)
	if e := s.Errors["sync/health"]; !strings.Contains(e, "atomic") {
		t.Fatalf("/status errors %v: no sync/health reason", s.Errors)
	}
}

// TestIntakeAboveCentralMaxPayloadRefused (issue 10): a chunk or message
// size the centre cannot take is refused at start, naming the field.
func TestIntakeAboveCentralMaxPayloadRefused(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"video.chunk_max_bytes", func(c *Config) { c.Telemetry.Enabled = false; c.Video.ChunkMaxBytes = 2 << 20 }},
		{"telemetry.max_payload", func(c *Config) { c.Video.Enabled = false; c.Telemetry.MaxPayload = 1 << 20 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir(), "tcp://127.0.0.1:1")
			tc.set(&cfg)
			a, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = a.Run(ctx)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "max payload 1048576") {
				t.Fatalf("Run: %v; want a config error naming %s and the max payload", err, tc.field)
			}
			t.Log(err)
		})
	}
}

func TestCentralLimitsValidated(t *testing.T) {
	for field, set := range map[string]func(*CentralConfig){
		"central.max_batch_size":     func(c *CentralConfig) { c.MaxBatchSize = 1 },
		"central.max_batch_inflight": func(c *CentralConfig) { c.MaxBatchInflight = 0 },
		"central.batch_timeout":      func(c *CentralConfig) { c.BatchTimeout = 0 },
		"central.max_control_line":   func(c *CentralConfig) { c.MaxControlLine = 100 },
		"central.max_txn_events":     func(c *CentralConfig) { c.Layout, c.MaxBatchSize, c.MaxTxnEvents = 1, 100, 100 },
		"central.commit_interval":    func(c *CentralConfig) { c.BatchTimeout = 150 * time.Millisecond },
	} {
		cfg := NewDefaultConfig()
		cfg.DataDir = t.TempDir()
		set(&cfg.Central)
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate = %v", field, err)
		}
	}
}
