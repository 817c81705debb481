package agent

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
	"github.com/edge-agent/edge-agent/replicate"
)

// TestBadClocksEndToEnd is issue 14 end to end: a real agent (Mosquitto,
// embedded JetStream) with four simulated drones — one an hour ahead, one
// a day behind, two correct — plus the test capture as a live video drone
// and the health sampler. The correct drones' late rate is 0; the skewed
// drones' events are flagged (ahead: clock-skew; behind: clock-skew and
// late) and counted per drone in /status and /metrics; no local or
// committed watermark is ever ahead of the receiving clock + skew; and a
// time cut across video, telemetry and health, waited for through the
// embedded server, returns only once every stream's committed watermark
// passed T, with every non-late event up to T inside it.
func TestBadClocksEndToEnd(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 14))
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	dir := t.TempDir()
	cfg := testConfig(t, dir, brk.URL())
	cfg.Central.Embedded.DataDir = filepath.Join(dir, "central")
	// A 2 s skew instead of 10 s keeps the run short: the drone an hour
	// ahead holds the telemetry watermark that far behind the clock.
	const skew = 2 * time.Second
	cfg.Watermark.MaxClockSkew = skew
	cfg.Video.SessionTimeout = time.Second
	a, cancel, done := startAgent(t, cfg)
	defer func() {
		cancel()
		<-done
	}()
	base := "http://" + a.HTTPAddr()
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: []string{a.CentralURL()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	start := time.Now()
	cutT := start.Add(2 * time.Second).UnixNano()
	type waited struct {
		cut centralread.TimeCut
		err error
		at  time.Time
	}
	waitDone := make(chan waited, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		defer wcancel()
		c, err := centralread.CutAt(wctx, nc, cutT, centralread.TimeCutOptions{Agent: a.ID(), Wait: true, PollWait: 200 * time.Millisecond})
		waitDone <- waited{c, err, time.Now()}
	}()

	// The drones: two correct, one an hour ahead, one a day behind.
	clocks := map[string]time.Duration{"ok-": 0, "ahead-": time.Hour, "behind-": -24 * time.Hour}
	var wg sync.WaitGroup
	published := map[string]uint64{}
	var mu sync.Mutex
	for prefix, off := range clocks {
		n := 1
		if off == 0 {
			n = 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: n, DronePrefix: prefix,
				ClientPrefix: "sim-" + prefix, Rate: 20, Duration: 3 * time.Second,
				Now: func() time.Time { return time.Now().Add(off) }})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for d, r := range res.Drones {
				published[d] = r.Published
			}
			mu.Unlock()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		capture, err := filepath.Abs(filepath.Join("..", "testdata", "h264.pcap"))
		if err == nil {
			_, err = replay.Send(ctx, capture, a.VideoAddr().String(), replay.Options{Speed: 1, Mux: true, Live: true})
		}
		if err != nil {
			t.Error(err)
		}
	}()
	// While they fly: no local watermark ahead of the clock + skew, and,
	// while all four fly, the telemetry watermark is not held back by the
	// drone a day behind (the one ahead holds it skew behind the clock;
	// 5 s more for a loaded machine, far from a day).
	held := func(lower, now int64) bool {
		return now > start.Add(1500*time.Millisecond).UnixNano() && now < start.Add(2500*time.Millisecond).UnixNano() &&
			lower < now-int64(skew+5*time.Second)
	}
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		n := 0
		defer func() { polled <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var s Status
			getJSON(t, base+"/status", &s)
			now := time.Now()
			for _, st := range s.Streams {
				if w := st.LocalWatermark; !w.IsZero() && (w.LowerNs > now.Add(skew).UnixNano() || w.UpperNs > now.Add(skew).UnixNano()) {
					t.Errorf("%s: local watermark %s ahead of the clock %s + %s", st.Name, w, now.Format(time.RFC3339Nano), skew)
				}
				if w := st.LocalWatermark; st.Name == "telemetry" && !w.IsZero() && held(w.LowerNs, now.UnixNano()) {
					t.Errorf("telemetry local watermark %s held back at %s", w, now.Format(time.RFC3339Nano))
				}
			}
			n++
		}
	}()
	wg.Wait()
	close(stop)
	t.Logf("%d status polls while flying; published %v", <-polled, published)

	w := <-waitDone
	if w.err != nil || !w.cut.Complete {
		t.Fatalf("time cut at T=start+2s: %v, complete %v: %+v", w.err, w.cut.Complete, w.cut.Streams)
	}
	if !w.at.After(time.Unix(0, cutT)) {
		t.Fatalf("the time cut returned at %s, before T", w.at.Format(time.RFC3339Nano))
	}
	t.Logf("time cut at T returned %s after T", w.at.Sub(time.Unix(0, cutT)))

	// Everything at the centre, once the last events are committed.
	var s Status
	if !testkit.UntilEvery(30*time.Second, 200*time.Millisecond, func() bool {
		getJSON(t, base+"/status", &s)
		caughtUp := true
		for _, st := range s.Streams {
			caughtUp = caughtUp && st.Replication != nil && st.Replication.BacklogEvents == 0
		}
		return caughtUp
	}) {
		t.Fatal("not caught up")
	}
	// The time cut, waited for and at random times over the run; checked
	// below against what the centre holds after them (commits only add).
	cuts := []centralread.TimeCut{w.cut}
	end := time.Now()
	for range 8 {
		T := start.UnixNano() + rng.Int64N(int64(end.Sub(start)))
		c, err := centralread.CutAt(ctx, nc, T, centralread.TimeCutOptions{Agent: a.ID()})
		if err != nil {
			t.Fatal(err)
		}
		cuts = append(cuts, c)
	}
	items := map[string][]centralread.Item{}
	for _, st := range centralread.DefaultTimeCutStreams {
		its, err := centralread.ReadAll(ctx, nc, st, centralread.ReadOptions{Agent: a.ID()})
		if err != nil {
			t.Fatal(err)
		}
		items[st] = its
	}

	// Flags per drone, and no committed watermark ahead of the clock.
	type tally struct{ events, late, skewed int }
	inFlight := 0 // telemetry commits while all four drones fly
	per := map[string]*tally{}
	for stream, its := range items {
		for _, it := range its {
			if it.Kind == centralread.ItemCommit {
				wm, at := it.Commit.Watermark, it.Commit.CommittedAtNs
				if wm.LowerNs > at+int64(skew) || wm.UpperNs > at+int64(skew) {
					t.Errorf("%s txn %d: committed watermark %+v ahead of the agent's clock at commit %d + %s", stream, it.Commit.Txn, wm, at, skew)
				}
				if stream == "telemetry" && held(wm.LowerNs, at) {
					t.Errorf("telemetry txn %d at %d: committed watermark %+v held back", it.Commit.Txn, at, wm)
				}
				if stream == "telemetry" && at > start.Add(1500*time.Millisecond).UnixNano() && at < start.Add(2500*time.Millisecond).UnixNano() {
					inFlight++
				}
				continue
			}
			r := it.Event.Record
			k := stream + "/" + r.RoutingKey
			if per[k] == nil {
				per[k] = &tally{}
			}
			per[k].events++
			if r.Flags.Has(localstream.FlagLate) {
				per[k].late++
			}
			if r.Flags.Has(localstream.FlagClockSkew) {
				per[k].skewed++
			}
		}
	}
	t.Logf("per stream/drone: %v; %d telemetry commits while all four flew", fmtTallies(per), inFlight)
	if inFlight == 0 {
		t.Fatal("no telemetry commit while all four drones flew: the check above saw nothing")
	}
	for d, n := range published {
		tl := per["telemetry/"+d]
		if tl == nil || uint64(tl.events) != n {
			t.Fatalf("%s: %v at the centre, published %d", d, tl, n)
		}
		switch {
		case d == "ahead-1" && (tl.skewed != tl.events || tl.late != 0):
			t.Errorf("ahead-1: %+v, want all clock-skew, none late", *tl)
		case d == "behind-1" && (tl.skewed != tl.events || tl.late != tl.events):
			t.Errorf("behind-1: %+v, want all clock-skew and late", *tl)
		case d != "ahead-1" && d != "behind-1" && (tl.skewed != 0 || tl.late != 0):
			t.Errorf("correct drone %s: %+v, want no late, no clock-skew", d, *tl)
		}
	}
	for k, tl := range per {
		if strings.HasPrefix(k, "video/") || strings.HasPrefix(k, "health/") {
			if tl.late != 0 || tl.skewed != 0 {
				t.Errorf("%s: %+v late or skewed", k, *tl)
			}
		}
	}
	if per["video/"+videoDrone(items)] == nil || len(per) < 6 {
		t.Fatalf("streams/drones at the centre: %v", fmtTallies(per))
	}

	// Counters as documented: per drone in /status and /metrics.
	tm := streamStatus(s, "telemetry")
	skews := map[string]bool{}
	for _, w := range tm.ClockSkew {
		skews[w.Writer] = w.IsBehind
		switch w.Writer {
		case "telemetry/ahead-1":
			if w.Ahead != published["ahead-1"] || w.Behind != 0 {
				t.Errorf("status clock_skew %+v, published %d", w, published["ahead-1"])
			}
		case "telemetry/behind-1":
			if w.Behind != published["behind-1"] || w.Ahead != 0 || !w.IsBehind {
				t.Errorf("status clock_skew %+v, published %d", w, published["behind-1"])
			}
		default:
			t.Errorf("status lists %+v", w)
		}
	}
	if len(skews) != 2 || tm.Marks.ClockSkewAhead != published["ahead-1"] || tm.Marks.ClockSkewBehind != published["behind-1"] ||
		s.Telemetry.ClockSkew != published["ahead-1"]+published["behind-1"] {
		t.Errorf("counters: status %v marks %+v telemetry %d", skews, tm.Marks, s.Telemetry.ClockSkew)
	}
	metrics := getText(t, base+"/metrics")
	for _, want := range []string{
		`edge_watermark_clock_skew_ahead_events_total{stream="telemetry",writer="telemetry/ahead-1"}`,
		`edge_watermark_clock_skew_behind_events_total{stream="telemetry",writer="telemetry/behind-1"}`,
		`edge_watermark_writer_behind{stream="telemetry",writer="telemetry/behind-1"} 1`,
		`edge_telemetry_clock_skew_total`,
	} {
		if !containsLine(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Every metric the docs name is served, and the video drone's counters
	// come out per drone as the ingest counted them.
	page := parseMetrics(t, metrics)
	checkDocumentedMetrics(t, page)
	vd := videoDrone(items)
	frames := page.samples[`edge_video_per_drone_frames_out_total{drone="`+vd+`"}`]
	if want := s.Video.PerDrone[vd].FramesOut; frames == 0 || frames < float64(want) {
		t.Errorf("/metrics: %s frames_out %v, /status said %d earlier", vd, frames, want)
	}

	complete := 0
	for _, c := range cuts {
		checkAgentTimeCut(t, a, items, c)
		if c.Complete {
			complete++
		}
	}
	t.Logf("%d time cuts checked against the centre, %d complete", len(cuts), complete)
}

// checkAgentTimeCut checks a time cut of agent a against the centre's
// items (centralread.TimeCut.Verify over the agent's local topologies).
func checkAgentTimeCut(t *testing.T, a *Agent, items map[string][]centralread.Item, c centralread.TimeCut) {
	t.Helper()
	if len(c.Streams) != len(centralread.DefaultTimeCutStreams) {
		t.Fatalf("T=%d: %d stream cuts", c.AtNs, len(c.Streams))
	}
	err := c.Verify(items, func(_, stream string, cut localstream.StreamCut, p localstream.Position) (bool, error) {
		return a.streams[stream].Topology().Contains(cut, p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func videoDrone(items map[string][]centralread.Item) string {
	for _, it := range items["video"] {
		if it.Kind == centralread.ItemEvent {
			return it.Event.Record.RoutingKey
		}
	}
	return ""
}

func fmtTallies[T any](m map[string]*T) map[string]T {
	out := map[string]T{}
	for k, v := range m {
		out[k] = *v
	}
	return out
}

func containsLine(text, prefix string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
