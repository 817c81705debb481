package unpack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
)

// sustainedWindow is how long agents and the unpacker run side by side
// in one op of BenchmarkUnpackSustained.
const sustainedWindow = 10 * time.Second

// BenchmarkUnpackSustained: what a central team lives with. Several
// agents (4, 8 drones each, 300 B JSON telemetry) append to their own
// Badger stores as fast as this machine lets them (as the telemetry
// ingester does: one goroutine each, AppendAsync) and replicate live
// (layout 2, the default) to one embedded server, while the unpacker
// (in process, as `edge-agent central --unpack`) runs alongside on the
// same machine, for sustainedWindow. It reports the events committed at
// the centre and those unpacked in the window (events/s, and their
// ratio: ≥ 1 when the unpacker keeps up), the largest lag seen (events
// committed and not yet unpacked, sampled every 10 ms), the lag at the
// window's end, and the drain: once the agents stop and have replicated
// what their stores still held (flat out, intake outruns the uplink and
// leaves a backlog in the stores), how long the unpacker takes to catch
// up, at how many events/s and how much CPU per event.
//
// Two cases: flat-out (each agent as fast as its store takes events) and
// fleet-10k (10,000 events/s offered in all, a hundred stations of 10
// drones at 10 Hz, the load docs/fleet.md measures).
func BenchmarkUnpackSustained(b *testing.B) {
	b.Run("flat-out", func(b *testing.B) { benchSustained(b, 0) })
	b.Run("fleet-10k", func(b *testing.B) { benchSustained(b, 10000) })
}

// benchSustained runs BenchmarkUnpackSustained with rate events/s offered
// in all (0: as fast as the stores take them).
func benchSustained(b *testing.B, rate int) {
	const agents, drones, size = 4, 8, 300
	srv := rigs.StartCentral(b, central.Config{})
	unc, err := nats.Connect("", nats.InProcessServer(srv), nats.Name("unpack-bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer unc.Close()
	payload := fmt.Appendf(nil, `{"drone":"d","seq":%d,"lat":%.6f,"lon":%.6f,"alt":%.2f,"pad":"%s"}`, 1, 52.1, 4.3, 120.0, strings.Repeat("x", size-80))
	keys := make([]string, drones)
	for d := range keys {
		keys[d] = fmt.Sprintf("d%d", d)
	}
	var repN, unpN, maxLag, endLag uint64
	var window, drain, drainTotal, drainCPU time.Duration
	var drainN, sessions uint64
	for i := range b.N {
		b.StopTimer()
		stream := fmt.Sprintf("sus%d", i)
		var reps []*replicate.Replicator
		var sinks []*replicate.JetStreamSink
		var sts []*localstream.Stream
		for a := range agents {
			s := rigs.OpenStore(b, b.TempDir(), localstream.Options{Logger: quiet()})
			st, err := s.CreateStream(stream, localstream.StreamConfig{})
			if err != nil {
				b.Fatal(err)
			}
			inst := replicate.NewInstanceID()
			sink, err := replicate.NewJetStreamSink(connect(b, srv.ClientURL()), fmt.Sprintf("gs-%d", a), inst, replicate.JetStreamOptions{})
			if err != nil {
				b.Fatal(err)
			}
			sts, sinks = append(sts, st), append(sinks, sink)
			reps = append(reps, replicate.NewReplicator(st, sink, inst, replicate.ReplicatorConfig{}))
		}
		// Warnings (a failed session) go to stderr: a session that fails
		// and resumes is a stall worth seeing.
		u, err := New(unc, stream, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			b.Fatal(err)
		}
		committed := func() uint64 {
			var n uint64
			for _, r := range reps {
				n += r.Stats().Events
			}
			return n
		}
		ctx, cancel := context.WithCancel(context.Background())
		appCtx, stopApp := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, r := range reps {
			wg.Go(func() {
				if err := r.Run(ctx); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Go(func() {
			if err := u.Run(ctx); err != nil {
				b.Error(err)
			}
		})
		// The intake as the telemetry ingester's: one goroutine per agent
		// appending asynchronously (store order = delivery order), the
		// drones in turn, held back by the store's append queue, or paced
		// (every 10 ms, what is due).
		var apps sync.WaitGroup
		for _, st := range sts {
			apps.Go(func() {
				t0 := time.Now()
				for n := 0; appCtx.Err() == nil; n++ {
					if rate > 0 {
						due := time.Duration(n) * time.Second / time.Duration(rate/agents)
						if wait := due - time.Since(t0); wait > 0 {
							sleep(appCtx, max(wait, 10*time.Millisecond))
						}
					}
					key := keys[n%drones]
					now := time.Now().UnixNano()
					err := st.AppendAsync(appCtx, localstream.Event{RoutingKey: key, Writer: stream + "/" + key, EventTime: now, IngestTime: now,
						ContentType: "application/json", Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + key + "/telemetry"}}, Payload: payload},
						func(_ localstream.Position, err error) {
							if err != nil && appCtx.Err() == nil {
								b.Error(err)
							}
						})
					if err != nil && appCtx.Err() == nil {
						b.Error(err)
						return
					}
				}
			})
		}
		b.StartTimer()
		start := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		for time.Since(start) < sustainedWindow {
			<-tick.C
			if c, d := committed(), u.Stats().Events; c > d {
				maxLag = max(maxLag, c-d)
			}
		}
		tick.Stop()
		c, d := committed(), u.Stats().Events
		window += time.Since(start)
		repN, unpN = repN+c, unpN+d
		endLag = max(endLag, c-min(c, d))
		b.StopTimer()
		stopApp()
		apps.Wait()
		// Drain: the agents catch up, then the unpacker.
		for _, r := range reps {
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
			if err := r.WaitCaughtUp(wctx); err != nil {
				b.Fatal(err)
			}
			wcancel()
		}
		total, t0, c0, d0 := committed(), time.Now(), cpuNow(), u.Stats().Events
		testkit.WaitFor(b, 10*time.Minute, "the unpacker to catch up", func() bool { return u.Stats().Events >= total })
		drain = max(drain, time.Since(t0))
		drainTotal += time.Since(t0)
		drainCPU += cpuNow() - c0
		drainN += total - d0
		sessions += u.Stats().Sessions
		cancel()
		wg.Wait()
		for _, s := range sinks {
			s.Close()
		}
	}
	b.ReportMetric(float64(repN)/window.Seconds(), "replicated_events/s")
	b.ReportMetric(float64(unpN)/window.Seconds(), "unpacked_events/s")
	b.ReportMetric(float64(unpN)/float64(max(repN, 1)), "ratio_unpacked/replicated")
	b.ReportMetric(float64(maxLag), "max_lag_events")
	b.ReportMetric(float64(endLag), "end_lag_events")
	b.ReportMetric(drain.Seconds(), "drain_s")
	b.ReportMetric(float64(sessions)/float64(b.N), "sessions")
	if drainN > 0 {
		b.ReportMetric(float64(drainN)/drainTotal.Seconds(), "drain_events/s")
		b.ReportMetric(float64(drainCPU.Microseconds())/float64(drainN), "drain_cpu_us/ev")
	}
}
