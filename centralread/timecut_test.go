package centralread

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// cutAgent is one simulated ground station for the time-cut tests: a real
// store with video, telemetry and health, their trackers, replicated to the
// centre.
type cutAgent struct {
	id       string
	store    *localstream.Store
	streams  map[string]*localstream.Stream
	trackers map[string]*watermark.Tracker
	repl     *replicate.Replication
	done     chan error
	// stop ends replication (idempotent).
	stop func()
}

func startCutAgent(t *testing.T, nc *nats.Conn, id string) *cutAgent {
	t.Helper()
	s, err := localstream.Open(t.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a := &cutAgent{id: id, store: s, streams: map[string]*localstream.Stream{}, trackers: map[string]*watermark.Tracker{}, done: make(chan error, 1)}
	for _, name := range DefaultTimeCutStreams {
		st, err := s.CreateStream(name, localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
		if err != nil {
			t.Fatal(err)
		}
		// A skew of 200 ms: a drone flagged ahead holds the watermark that
		// far behind the clock, short enough for a 1.2 s run.
		tr, err := watermark.NewTracker(st, s, watermark.Options{Logger: slog.New(slog.DiscardHandler),
			IdleTimeout: 300 * time.Millisecond, MaxClockSkew: 200 * time.Millisecond, MaxClockBehind: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		a.streams[name], a.trackers[name] = st, tr
	}
	instance := newInstance()
	sink, err := replicate.NewJetStreamSink(nc, id, instance, replicate.JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.repl = replicate.NewReplication(s, sink, replicate.ReplicationConfig{Instance: instance,
		Template: replicate.ReplicatorConfig{CommitInterval: 20 * time.Millisecond, IdleCommitInterval: 50 * time.Millisecond},
		Watermarks: func(stream string) replicate.CommittedWatermarkFunc {
			tr := a.trackers[stream]
			return func(cut localstream.StreamCut) (watermark.Watermark, error) {
				w, err := tr.CommittedAt(cut)
				return w, err
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { a.done <- a.repl.Run(ctx) }()
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			cancel()
			<-a.done
		})
	}
	t.Cleanup(func() {
		a.stop()
		s.Close()
	})
	return a
}

// cutDrone is a simulated source with a clock offset that may jump.
type cutDrone struct {
	stream, key string
	offset      time.Duration
	from        int // first step it sends
	every       int // sends every n-th step
}

// ingest does what an ingest does: Admit, append flagged, NoteAdmitted.
func (a *cutAgent) ingest(t *testing.T, d cutDrone, rng *rand.Rand) {
	now := time.Now()
	et := now.Add(d.offset - time.Duration(rng.IntN(30))*time.Millisecond).UnixNano()
	writer := d.stream + "/" + d.key
	tr := a.trackers[d.stream]
	adm := tr.Admit(writer, et, now.UnixNano())
	pos, err := a.streams[d.stream].Append(context.Background(), localstream.Event{RoutingKey: d.key, Writer: writer,
		EventTime: et, IngestTime: now.UnixNano(), Flags: adm.Flags(), Payload: []byte(d.key)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.NoteAdmitted(writer, adm, et, pos); err != nil {
		t.Fatal(err)
	}
}

// TestTimeCutProperty: two agents with video, telemetry and health —
// drones with correct clocks, one an hour ahead, one a day behind, one
// whose clock jumps, one joining late, one going idle — replicate to an
// embedded JetStream server. For random T over the run, CutAt(T) must be,
// per agent and stream, the first commit record whose watermark lower
// passes T; every non-late event with time ≤ T must lie inside its
// watermark cut and at or before it in the stream; and a waiting CutAt for
// a T in the future returns only once every stream's committed watermark
// passed it.
func TestTimeCutProperty(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 14))
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	agents := []*cutAgent{startCutAgent(t, nc, "gs-a"), startCutAgent(t, nc, "gs-b")}
	const steps = 120
	drones := []cutDrone{
		{stream: "telemetry", key: "ok-1", every: 1},
		{stream: "telemetry", key: "ok-2", every: 2, from: 30},
		{stream: "telemetry", key: "ahead", offset: time.Hour, every: 1},
		{stream: "telemetry", key: "behind", offset: -24 * time.Hour, every: 3},
		{stream: "telemetry", key: "jumpy", every: 1},
		{stream: "video", key: "cam-1", every: 3},
		{stream: "video", key: "cam-2", every: 5, from: 10},
		{stream: "health", key: "host", every: 4},
	}
	// A waiting cut for a T in the middle of the run.
	start := time.Now()
	waitT := start.Add(steps / 2 * 10 * time.Millisecond).UnixNano()
	type waited struct {
		cut TimeCut
		err error
		at  time.Time
	}
	waitDone := make(chan waited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := CutAt(ctx, nc, waitT, TimeCutOptions{Wait: true, PollWait: 100 * time.Millisecond})
		waitDone <- waited{c, err, time.Now()}
	}()
	var wg sync.WaitGroup
	for ai, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(ai)))
			ds := append([]cutDrone(nil), drones...)
			for step := range steps {
				for i := range ds {
					d := &ds[i]
					if d.key == "jumpy" && r.IntN(15) == 0 {
						d.offset = []time.Duration{0, time.Hour, -48 * time.Hour, 2 * time.Second}[r.IntN(4)]
					}
					if d.key == "ok-1" && step > 60 && step < 90 {
						continue // idle for a while (beyond the idle timeout)
					}
					if step >= d.from && step%d.every == 0 {
						a.ingest(t, *d, r)
					}
				}
				time.Sleep(10 * time.Millisecond) // a step of the run: event times and watermarks follow the wall clock
			}
			// The drones land: their streams then follow the clock.
			for _, d := range ds {
				if err := a.trackers[d.stream].CloseWriter(d.stream + "/" + d.key); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	w := <-waitDone
	if w.err != nil || !w.cut.Complete {
		t.Fatalf("waiting cut at %s: %v, complete %v: %+v", time.Unix(0, waitT).Format(time.RFC3339Nano), w.err, w.cut.Complete, w.cut.Streams)
	}
	if !w.at.After(time.Unix(0, waitT)) {
		t.Fatalf("waiting cut returned at %s, before T %s", w.at, time.Unix(0, waitT))
	}
	// Let the last watermarks reach the centre (a cut at the run's end is
	// then complete: every stream's watermark passed it), then stop
	// replicating so that what is read below is all there is.
	testkit.WaitFor(t, 30*time.Second, "the last watermarks at the centre", func() bool {
		c, err := CutAt(testCtx(t, 30*time.Second), nc, end.UnixNano(), TimeCutOptions{})
		return err == nil && c.Complete
	})
	for _, a := range agents {
		a.stop()
	}
	items := map[string][]Item{}
	for _, st := range DefaultTimeCutStreams {
		its, err := ReadAll(testCtx(t, 30*time.Second), nc, st, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		items[st] = its
	}
	checkTimeCut(t, agents, items, w.cut)
	var events, late, skewed int
	for _, its := range items {
		for _, it := range its {
			if it.Kind == ItemEvent {
				events++
				if it.Event.Record.Flags.Has(localstream.FlagLate) {
					late++
				}
				if it.Event.Record.Flags.Has(localstream.FlagClockSkew) {
					skewed++
				}
			}
		}
	}
	t.Logf("%d events at the centre, %d late, %d clock-skew", events, late, skewed)
	if late == 0 || skewed == 0 {
		t.Fatalf("no late or skewed events: the run does not exercise the bounds")
	}
	ts := []int64{start.Add(-time.Second).UnixNano(), end.UnixNano()}
	for range 40 {
		ts = append(ts, start.UnixNano()+rng.Int64N(int64(end.Sub(start))))
	}
	// T exactly at event times and at watermark lowers: the boundaries.
	for range 10 {
		its := items["telemetry"]
		it := its[rng.IntN(len(its))]
		if it.Kind == ItemEvent {
			ts = append(ts, it.Event.Record.EventTime)
		} else {
			ts = append(ts, it.Commit.Watermark.LowerNs, it.Commit.Watermark.LowerNs-1)
		}
	}
	// T ahead of the receiving clock: no watermark may have passed it, so
	// its cut is incomplete whichever times the draws above picked (they
	// are incomplete only when they hit an event of a drone whose clock
	// runs ahead).
	future := time.Now().Add(time.Hour).UnixNano()
	if c, err := CutAt(testCtx(t, 30*time.Second), nc, future, TimeCutOptions{}); err != nil {
		t.Fatal(err)
	} else if c.Complete {
		t.Fatalf("cut at %s, an hour past the receiving clock, is complete: a watermark ran ahead of the clock", time.Unix(0, future).Format(time.RFC3339Nano))
	}
	ts = append(ts, future)
	complete := 0
	for _, T := range ts {
		c, err := CutAt(testCtx(t, 30*time.Second), nc, T, TimeCutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Complete {
			complete++
		}
		checkTimeCut(t, agents, items, c)
	}
	// The waiting cut is the same as the one computed afterwards.
	later, err := CutAt(testCtx(t, 30*time.Second), nc, waitT, TimeCutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range w.cut.Streams {
		if l, _ := later.Get(s.Agent, s.Stream); l.Seq != s.Seq {
			t.Fatalf("%s/%s: waiting cut at seq %d, afterwards %d", s.Agent, s.Stream, s.Seq, l.Seq)
		}
	}
	t.Logf("%d times checked, %d complete; waiting cut returned %s after T", len(ts), complete, w.at.Sub(time.Unix(0, waitT)))
	if complete == 0 || complete == len(ts) {
		t.Fatalf("%d of %d cuts complete: the times do not span the run", complete, len(ts))
	}
}

// checkTimeCut checks c against everything at the centre (items by
// stream): it covers every agent and stream, and Verify holds.
func checkTimeCut(t *testing.T, agents []*cutAgent, items map[string][]Item, c TimeCut) {
	t.Helper()
	byID := map[string]*cutAgent{}
	for _, a := range agents {
		byID[a.id] = a
		for _, stream := range DefaultTimeCutStreams {
			if _, ok := c.Get(a.id, stream); !ok {
				t.Fatalf("T=%d: no cut for %s/%s", c.AtNs, a.id, stream)
			}
		}
	}
	if len(c.Streams) != len(agents)*len(DefaultTimeCutStreams) {
		t.Fatalf("T=%d: %d stream cuts for %d agents", c.AtNs, len(c.Streams), len(agents))
	}
	err := c.Verify(items, func(agent, stream string, cut localstream.StreamCut, p localstream.Position) (bool, error) {
		return byID[agent].streams[stream].Topology().Contains(cut, p)
	})
	if err != nil {
		t.Fatal(err)
	}
}
