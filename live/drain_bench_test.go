package live

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// BenchmarkDrainAfterOutage (issue 38): the backlog of a 600 s outage —
// 4 drones × 20 Hz × ~200 B, 48,000 events, pre-filled with past event
// times rather than waited for — sent once the link is back through a
// 2 Mbit/s (250,000 B/s) capped proxy: the agent's replication (its
// uplink cap the same, charged on the wire) against a NATS leaf node fed
// the same events through the same capped proxy, its edge stream sourced
// by the hub. Reported: each one's time to a complete backlog (the agent:
// the centre's ack of the commit holding the last event), their ratio,
// and the proxy's rate while the agent's backlog waited — from the link's
// return until the last pack had crossed it; the agent's result is
// checked exactly once and in order. The agent's commits carry the
// committed watermark of a tracker that noted every event (one writer a
// drone, as the telemetry intake does): reported too is how far a
// commit's lower fell behind the oldest of the drones' newest events it
// had committed, at worst (lower_behind_s), against the bound
// docs/watermark.md states, the backlog's span ÷ 256 (bound_s) — the
// benchmark fails past it. JSON position reports (mqttsim's) and random
// 200 B payloads. DRAIN_AGENT_ONLY=1 runs the agent's side alone (the
// leaf's takes ~2 minutes a kind).
func BenchmarkDrainAfterOutage(b *testing.B) {
	for _, kind := range []string{"json", "random"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				agent, rate, behind := agentDrain(b, kind)
				b.ReportMetric(behind.Seconds(), "lower_behind_s")
				b.ReportMetric(drainBound.Seconds(), "bound_s")
				if os.Getenv("DRAIN_AGENT_ONLY") != "" {
					b.Logf("agent %.2f s, rate %.3f × the cap, lower at worst %s behind (bound %s)", agent.Seconds(), rate/drainLink, behind, drainBound)
					continue
				}
				leaf := leafDrain(b, kind)
				b.ReportMetric(agent.Seconds(), "agent_s")
				b.ReportMetric(leaf.Seconds(), "leaf_s")
				b.ReportMetric(agent.Seconds()/leaf.Seconds(), "agent/leaf")
				b.ReportMetric(rate/drainLink, "cap_use")
				b.Logf("%s: agent %.2f s, leaf %.2f s (%.2f×), proxy during the agent's drain %.0f B/s = %.2f × the cap",
					kind, agent.Seconds(), leaf.Seconds(), agent.Seconds()/leaf.Seconds(), rate, rate/drainLink)
			}
		})
	}
}

const (
	drainLink    = 2_000_000 / 8
	drainDrones  = 4
	drainHz      = 20
	drainOutage  = 600 * time.Second
	drainPayload = 200
	// drainBound is the bound docs/watermark.md states for a commit's
	// lower: the backlog's span (the outage: nothing arrives during the
	// drain) ÷ 256.
	drainBound = drainOutage / 256
)

// drainEvents is the outage's capture: each drone's reports, oldest first.
func drainEvents(kind string) []localstream.Event {
	n := drainDrones * drainHz * int(drainOutage/time.Second)
	start := time.Now().Add(-drainOutage)
	evs := make([]localstream.Event, 0, n)
	for i := range n {
		d := fmt.Sprintf("drone-%d", i%drainDrones)
		at := start.Add(time.Duration(i/drainDrones) * time.Second / drainHz)
		var p []byte
		if kind == "json" {
			k := float64(i / drainDrones)
			p, _ = json.Marshal(mqttsim.Telemetry{Drone: d, Seq: uint64(i/drainDrones + 1), Timestamp: at.UnixMilli(),
				Lat: 47.3769 + k*1e-6, Lon: 8.5417 + k*2e-6, AltM: 120 + float64(i%50)/10, RollDeg: 1.5, PitchDeg: -2.25,
				YawDeg: float64(i % 360), SpeedMps: 12.5, Battery: 95 - k/1000, Mode: "AUTO"})
		} else {
			p = make([]byte, drainPayload)
			rand.Read(p)
		}
		evs = append(evs, localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: at.UnixNano(), Payload: p})
	}
	return evs
}

// agentDrain fills a store with the outage's backlog and times its
// replication through the capped proxy; it returns the time, the
// proxy's rate over the drain and how far a commit's lower fell behind
// the oldest of the drones' newest committed events, at worst.
func agentDrain(b *testing.B, kind string) (time.Duration, float64, time.Duration) {
	b.Helper()
	srv := rigs.StartCentral(b, central.Config{})
	px := newLinkProxy(b, srv.ClientURL()[len("nats://"):], drainLink)
	dir := filepath.Join(b.TempDir(), "store")
	store := rigs.OpenStore(b, dir, localstream.Options{})
	stream := map[string]string{"json": "telemetry", "random": "raw"}[kind]
	st, err := store.CreateStream(stream, localstream.StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	tr, err := watermark.NewTracker(st, store, watermark.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	evs := drainEvents(kind)
	// A drone's events carry its number in their ingest time's offset
	// from the first event (event times step by 50 ms, a multiple of
	// drainDrones ns): OnCommit tells the drones of a commit's events.
	first := evs[0].EventTime
	for i := range evs {
		evs[i].IngestTime = evs[i].EventTime + int64(i%drainDrones)
	}
	for i := 0; i < len(evs); i += 1000 {
		group := evs[i:min(i+1000, len(evs))]
		done := make(chan error, 1)
		var pos []localstream.Position
		if err := st.AppendGroupAsync(ctx, group, func(p []localstream.Position, err error) { pos = p; done <- err }); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		for j, ev := range group {
			if err := tr.Note(ev.Writer, ev.EventTime, pos[j]); err != nil {
				b.Fatal(err)
			}
		}
	}
	up := replicate.NewUplink(drainLink)
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: []string{px.URL()}, IgnoreDiscoveredServers: true, Dialer: up.Dialer(nil)}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	sink, err := replicate.NewJetStreamSink(nc, "bench-agent", "bench", replicate.JetStreamOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// Complete when the centre acked the commit of the last event. Each
	// commit's lower against the oldest of the drones' newest events
	// committed so far (commits come one at a time, in order).
	var committed atomic.Int64
	complete := make(chan time.Time, 1)
	newest := make([]int64, drainDrones) // drone → its newest committed event time
	var behind time.Duration
	var commits int
	var worst string
	r := replicate.NewReplicator(st, sink, "bench", replicate.ReplicatorConfig{Uplink: up,
		Watermark: replicate.TrackerWatermark(tr, nil),
		OnCommit: func(c replicate.Committed, ingest []int64) {
			for _, at := range ingest {
				d := (at - first) % drainDrones
				newest[d] = max(newest[d], at-d)
			}
			commits++
			if lower := c.Record.Watermark.LowerNs; lower != 0 && slices.Min(newest) != 0 {
				if lag := time.Duration(slices.Min(newest) - lower); lag > behind {
					behind, worst = lag, fmt.Sprintf("commit %d of %d events, seq %d, lower %s into the outage", commits, c.Record.Events, c.Seq, time.Duration(lower-first))
				}
			}
			if committed.Add(int64(c.Record.Events)) == int64(len(evs)) {
				complete <- time.Now()
			}
		}})
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	start := time.Now()
	go func() { runDone <- r.Run(rctx) }()
	var end time.Time
	select {
	case end = <-complete:
	case <-ctx.Done():
		b.Fatal("the agent's backlog never completed")
	}
	stop()
	<-runDone
	// The proxy's rate while a backlog waited: from the link's return
	// (Run starts on a connected link) until the last pack had crossed
	// it — not the last ack's way back. Packs are the only frames of
	// more than a KiB.
	last := px.lastFrame(1<<10, end)
	_, other := px.window(start, last)
	rate := float64(other) / last.Sub(start).Seconds()
	store.Close()
	checkExactlyOnce(b, dir, srv.ClientURL(), "bench-agent")
	st0 := r.Stats()
	b.Logf("%d commits, %d retries, %d watermark fallbacks; the lower furthest behind: %s", commits, st0.Retries, st0.WatermarkFallbacks, worst)
	if behind >= drainBound {
		b.Errorf("a commit's lower %s behind the oldest of the drones' newest committed events: past the bound %s (docs/watermark.md)", behind, drainBound)
	}
	return end.Sub(start), rate, behind
}

// leafDrain stores the outage's backlog in a leaf node's edge stream while
// its link is down, then times the hub's copy after the link is back.
func leafDrain(b *testing.B, kind string) time.Duration {
	b.Helper()
	p := newLeafPair(b, drainLink)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p.proxy.setDown(true)
	evs := drainEvents(kind)
	for _, ev := range evs {
		// The fill is not timed: when the leaf stores slower than it is
		// fed (a loaded machine stalled it at 4,096 publishes pending),
		// it catches up and the event is sent again.
		for {
			err := p.emit(ctx, "telemetry", ev)
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				if err != nil {
					b.Fatal(err)
				}
				break
			}
			select {
			case <-p.leafJS.PublishAsyncComplete():
			case <-ctx.Done():
				b.Fatal("the leaf did not store the backlog")
			}
		}
	}
	select {
	case <-p.leafJS.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("the leaf did not store the backlog")
	}
	start := time.Now()
	p.proxy.setDown(false)
	if !testkit.UntilEvery(10*time.Minute, 20*time.Millisecond, func() bool { return p.hubMsgs(ctx, "TEL") == uint64(len(evs)) }) {
		b.Fatal("the leaf's backlog never completed at the hub")
	}
	return time.Since(start)
}
