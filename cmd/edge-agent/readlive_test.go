package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/live"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestReadLive: `edge-agent read --live` prints each drone's latest live
// value as a JSON line with its age; --drone selects one; flags of the
// backlog's read are refused with --live.
func TestReadLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := rigs.StartCentral(t, central.Config{DataDir: t.TempDir()})
	store, err := localstream.Open(t.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	st, err := store.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	for _, d := range []string{"d1", "d2"} {
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: now, IngestTime: now,
			ContentType: "application/json", Payload: []byte(`{"drone":"` + d + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lane, err := live.New("a1", []*localstream.Stream{st}, live.NewDefaultConfig(), live.Options{Conn: func() *nats.Conn { return nc }})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); lane.Run(lctx) }()
	defer func() { stop(); <-done }()

	read := func(args ...string) []liveLine {
		var out bytes.Buffer
		if err := runRead(ctx, append([]string{"--central", srv.ClientURL(), "--live"}, args...), &out, io.Discard); err != nil {
			return nil
		}
		var lines []liveLine
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var ll liveLine
			if l != "" && json.Unmarshal([]byte(l), &ll) == nil {
				lines = append(lines, ll)
			}
		}
		return lines
	}
	var lines []liveLine
	if !testkit.UntilEvery(10*time.Second, 50*time.Millisecond, func() bool { lines = read(); return len(lines) >= 2 }) {
		t.Fatalf("read --live: %+v, want d1 and d2", lines)
	}
	for i, d := range []string{"d1", "d2"} {
		l := lines[i]
		if l.Type != "live" || l.Agent != "a1" || l.Stream != "telemetry" || l.Drone != d || l.EventTimeNs != now ||
			l.AgeSeconds <= 0 || l.AgeSeconds > 30 || string(l.Payload) != `{"drone":"`+d+`"}` {
			t.Errorf("line %d: %+v", i, l)
		}
	}
	if one := read("--drone", "d2"); len(one) != 1 || one[0].Drone != "d2" {
		t.Errorf("--drone d2: %+v", one)
	}
	if err := runRead(ctx, []string{"--central", srv.ClientURL(), "--live", "--follow"}, io.Discard, io.Discard); err == nil {
		t.Error("--live --follow: no usage error")
	}
}
