package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/live"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestAgentLiveLane: the agent runs the live lane by default — each
// drone's latest telemetry and the host's health reach the centre's
// EDGELIVE, video stays off — and /status shows the lane and each
// stream's catch-up (behind in time and bytes, rates, ETA).
func TestAgentLiveLane(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, t.TempDir(), "")
	cfg.Telemetry.Enabled = false
	cfg.Video.Enabled = false
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	st, err := a.Store().Stream("telemetry")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, d := range []string{"d1", "d2"} {
			now := time.Now().UnixNano()
			if _, err := st.Append(ctx, localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: now, IngestTime: now,
				ContentType: "application/json", Payload: fmt.Appendf(nil, `{"i":%d}`, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	nc, err := nats.Connect(a.CentralURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var vals []live.Value
	var got map[string]bool
	if !testkit.UntilEvery(15*time.Second, 50*time.Millisecond, func() bool { // each poll reads at the centre
		vals, err = live.Read(ctx, nc, live.ReadOptions{Agent: a.ID()})
		got = map[string]bool{}
		for _, v := range vals {
			// The first value goes at once, the latest within the interval (1 s).
			got[v.Stream+"/"+v.Drone] = v.Stream != "telemetry" || string(v.Payload) == `{"i":4}`
		}
		return got["telemetry/d1"] && got["telemetry/d2"] && got["health/"+a.ID()]
	}) {
		t.Fatalf("live values at the centre: %v (err %v), want the latest telemetry of d1 and d2, and health", got, err)
	}
	for _, v := range vals {
		if v.Stream == "video" {
			t.Errorf("a video value while video's lane is off by default: %+v", v)
		}
	}
	var s Status
	var tel StreamStatus
	if !testkit.UntilEvery(15*time.Second, 100*time.Millisecond, func() bool {
		getJSON(t, "http://"+a.HTTPAddr()+"/status", &s)
		tel = streamStatus(s, "telemetry")
		return s.Live != nil && tel.CatchUp != nil && tel.CatchUp.BehindSeconds != nil && tel.CatchUp.ETASeconds != nil
	}) {
		t.Fatalf("/status: live %+v, telemetry catch-up %+v", s.Live, tel.CatchUp)
	}
	streams := map[string]live.StreamStats{}
	for _, ls := range s.Live.Streams {
		streams[ls.Stream] = ls
	}
	if streams["telemetry"].Sent == 0 || streams["health"].Sent == 0 || streams["telemetry"].Drones != 2 {
		t.Errorf("/status live: %+v", s.Live.Streams)
	}
	if _, on := streams["video"]; on {
		t.Errorf("/status live: video's lane is on by default")
	}
	m := getText(t, "http://"+a.HTTPAddr()+"/metrics")
	for _, want := range []string{`edge_live_sent_total{stream="telemetry"}`, `edge_live_drones{stream="health"} 1`,
		`edge_catch_up_backlog_bytes{stream="telemetry"}`, "edge_live_share_bytes_per_second 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
