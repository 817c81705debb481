package replicate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// fleetConfig is one fleet simulation: agents, each with its own Badger
// store, appender and real replicator, against an embedded 3-node
// JetStream cluster (R3, default server limits).
type fleetConfig struct {
	agents int
	// drones per agent, each appending rate events/s.
	drones int
	rate   int
	run    time.Duration
	// faults: kill the stream leader at run/4 (restarted at 3·run/4) and
	// cut a third of the agents' uplinks from run/2 for cut.
	faults bool
	cut    time.Duration
	// layout is the central layout the agents write (0: default).
	layout int
}

// fleetResult is what a simulation measured.
type fleetResult struct {
	events, commits int
	// throughput is committed events per second of the run.
	throughput float64
	// p50, p99 of append → commit acked.
	p50, p99 time.Duration
	// worstGap is the longest time an agent whose link stayed up went
	// without a commit; worstRecovery the longest time from a cut link's
	// return to that agent's next commit.
	worstGap, worstRecovery time.Duration
	retries                 uint64
	leaderKilled            string
	cutAgents               int
}

func (r fleetResult) String() string {
	return fmt.Sprintf("%d events in %d commits; %.0f events/s committed; append→committed p50 %s p99 %s; longest without a commit (link up) %s; recovery after the link's return ≤ %s (%d agents cut); leader killed: %q; %d retries",
		r.events, r.commits, r.throughput, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond),
		r.worstGap.Round(time.Millisecond), r.worstRecovery.Round(time.Millisecond), r.cutAgents, r.leaderKilled, r.retries)
}

// fleetStation is one simulated ground station.
type fleetStation struct {
	fleetAgent
	proxies []*faultProxy
	nc      *nats.Conn
}

func runFleet(t testing.TB, fc fleetConfig) fleetResult {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 13))
	ctx0 := testCtx(t, 120*time.Second)
	nodes, err := central.StartLocalCluster(ctx0, t.TempDir(), "fleet", 3, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.ClientURL())
	}
	admin := connect(t, urls...)
	js, _ := jetstream.New(admin)
	name := wire.StreamName(testStream)
	if _, err := js.CreateStream(ctx0, jetstream.StreamConfig{Name: name, Subjects: []string{"edge." + testStream + ".>"},
		Storage: jetstream.FileStorage, Replicas: 3, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	var lat latencies
	gaps := newCommitGaps(time.Now())
	stations := make([]*fleetStation, fc.agents)
	names := make([]string, fc.agents)
	var setup sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range fc.agents {
		setup.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s := &fleetStation{}
			s.name = fmt.Sprintf("gs-%03d", i)
			// Periodic durability: a real station fsyncs its own disk; N
			// stores fsyncing one VM disk would measure that disk.
			store, st, err := openStoreOpts(t.TempDir(), localstream.Options{MemTableSize: 2 << 20, ValueLogFileSize: 4 << 20,
				MinFreeBytes: -1, Durability: localstream.DurabilityPeriodic})
			if err != nil {
				t.Error(err)
				return
			}
			s.store, s.st = store, st
			s.app = newAppender(st, fc.drones)
			if err := s.app.warm(context.Background()); err != nil {
				t.Error(err)
				return
			}
			// One proxy per node: cutting the uplink is taking all three down.
			var purls []string
			for k := range nodes {
				px := newFaultProxy(t, strings.TrimPrefix(urls[(i+k)%len(urls)], "nats://"))
				s.proxies = append(s.proxies, px)
				purls = append(purls, px.URL())
			}
			s.nc = connect(t, purls...)
			stations[i], names[i] = s, s.name
		})
	}
	setup.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() {
		for _, s := range stations {
			s.store.Close()
		}
	})
	start := time.Now()
	gaps.start = start
	for _, s := range stations {
		s.rp = startReplica(t, s.nc, s.st, s.name, ReplicatorConfig{OnCommit: func(c Committed, ingest []int64) {
			gaps.note(c.Record.Agent, time.Now())
			lat.add(ingest)
		}}, JetStreamOptions{Replicas: 3, Layout: fc.layout})
	}
	ctx, cancel := context.WithTimeout(context.Background(), fc.run)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, fc.agents)
	interval := time.Second / time.Duration(max(fc.rate, 1))
	for _, s := range stations {
		wg.Go(func() {
			// Stagger the stations inside one interval.
			time.Sleep(time.Duration(rng.Int64N(int64(interval))))
			if err := s.app.run(ctx, interval, fc.drones); err != nil {
				errs <- fmt.Errorf("%s: %w", s.name, err)
			}
		})
	}
	res := fleetResult{}
	var cutAt, upAt time.Time
	var cut []*fleetStation
	if fc.faults {
		// The faults' schedule: the leader killed at 1/4 of the run, a third
		// of the stations cut off at 1/2 for fc.cut, the leader back at 3/4.
		time.Sleep(fc.run / 4)
		leader := -1
		testkit.WaitFor(t, 30*time.Second, "a stream leader", func() bool {
			for i, n := range nodes {
				if n.Running() && n.IsStreamLeader(name) {
					leader = i
					return true
				}
			}
			return false
		})
		res.leaderKilled = nodes[leader].ClientURL()
		nodes[leader].Shutdown()
		time.Sleep(max(fc.run/2-time.Since(start), 0))
		perm := rng.Perm(fc.agents)
		for _, i := range perm[:fc.agents/3] {
			cut = append(cut, stations[i])
		}
		res.cutAgents = len(cut)
		cutAt = time.Now()
		for _, s := range cut {
			for _, px := range s.proxies {
				px.SetDown(true)
			}
		}
		time.Sleep(fc.cut)
		upAt = time.Now()
		for _, s := range cut {
			for _, px := range s.proxies {
				px.SetDown(false)
			}
		}
		time.Sleep(max(3*fc.run/4-time.Since(start), 0))
		if err := nodes[leader].Start(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	end := time.Now()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every station catches up, then the centre is read back once and
	// checked per station: every local event exactly once, per drone in
	// order, the commit chain unbroken.
	for _, s := range stations {
		waitCaughtUp(t, admin, s.st, s.name, 120*time.Second)
	}
	isCut := map[string]bool{}
	for _, s := range cut {
		isCut[s.name] = true
		at := gaps.firstAfter(s.name, upAt)
		if at.IsZero() {
			t.Errorf("%s: no commit after its link returned", s.name)
			continue
		}
		res.worstRecovery = max(res.worstRecovery, at.Sub(upAt))
	}
	longest := gaps.longest(names, end)
	for _, n := range names {
		if !isCut[n] {
			res.worstGap = max(res.worstGap, longest[n])
		}
	}
	lastErrs := map[string]int{}
	for _, s := range stations {
		st := s.rp.r.Stats()
		res.retries += st.Retries
		if st.LastError != "" {
			lastErrs[st.LastError]++
		}
		s.rp.close()
	}
	if len(lastErrs) > 0 {
		t.Logf("last errors (stations): %v", lastErrs)
	}
	items, err := centralread.ReadAll(testCtx(t, 300*time.Second), admin, testStream, centralread.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byAgent := map[string][]centralread.Item{}
	for _, it := range items {
		byAgent[it.Agent] = append(byAgent[it.Agent], it)
	}
	for _, s := range stations {
		ev, commits := verifyItems(t, byAgent[s.name], s.st)
		res.events += ev
		res.commits += commits
	}
	if len(byAgent) != fc.agents {
		t.Fatalf("the centre holds %d agents, want %d", len(byAgent), fc.agents)
	}
	res.throughput = float64(lat.n()) / end.Sub(start).Seconds()
	res.p50, res.p99 = lat.quantile(0.5), lat.quantile(0.99)
	if fc.faults {
		_ = cutAt
	}
	return res
}

// latencies collects append → commit acked durations.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(ingest []int64) {
	now := time.Now()
	l.mu.Lock()
	for _, in := range ingest {
		l.d = append(l.d, now.Sub(time.Unix(0, in)))
	}
	l.mu.Unlock()
}

func (l *latencies) n() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[int(q*float64(len(l.d)-1))]
}

// TestFleetQuick is the small fleet of `make test`: 6 stations on an R3
// cluster, the stream leader killed and two stations' uplinks cut
// mid-run. Nothing is lost or duplicated, and every cut station commits
// within 5 s of its link's return. BenchmarkFleet runs the large ones.
func TestFleetQuick(t *testing.T) {
	res := runFleet(t, fleetConfig{agents: 6, drones: 4, rate: 10, run: 8 * time.Second, faults: true, cut: 2 * time.Second})
	t.Log(res)
	if res.worstRecovery > 5*time.Second {
		t.Errorf("a station took %s after its link returned to commit (bound 5 s)", res.worstRecovery)
	}
	if res.cutAgents != 2 || res.leaderKilled == "" {
		t.Fatalf("faults did not happen: %d cut, leader %q", res.cutAgents, res.leaderKilled)
	}
}

// BenchmarkFleet runs the fleet simulation of issue 13 for N stations
// (EDGE_FLEET_N, comma-separated; default 10,50,200), each with 10 drones
// at 10 events/s, for EDGE_FLEET_SECONDS (default 20), without and with
// faults (the stream leader killed, a third of the uplinks cut for 5 s).
func BenchmarkFleet(b *testing.B) {
	ns := []int{10, 50, 200}
	if s := os.Getenv("EDGE_FLEET_N"); s != "" {
		ns = nil
		for f := range strings.SplitSeq(s, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
				ns = append(ns, n)
			}
		}
	}
	secs := 20
	if s := os.Getenv("EDGE_FLEET_SECONDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			secs = n
		}
	}
	for _, n := range ns {
		for _, faults := range []bool{false, true} {
			b.Run(fmt.Sprintf("agents=%d/faults=%v", n, faults), func(b *testing.B) {
				var res fleetResult
				for range b.N {
					res = runFleet(b, fleetConfig{agents: n, drones: 10, rate: 10, run: time.Duration(secs) * time.Second, faults: faults, cut: 5 * time.Second})
				}
				b.Log(res)
				b.ReportMetric(res.throughput, "events/s")
				b.ReportMetric(float64(res.p99)/1e6, "p99_ms")
				b.ReportMetric(float64(res.worstGap)/1e6, "worst_gap_ms")
				if faults {
					b.ReportMetric(float64(res.worstRecovery)/1e6, "worst_recovery_ms")
				}
			})
		}
	}
}

// BenchmarkCentreCommits measures what the central cluster alone takes:
// S stations (EDGE_CENTRE_STATIONS, default 200,1000), each a goroutine
// with its own connection committing layout-2 transactions of 10 JSON
// telemetry events (the real sink and commit path, chained and fenced)
// back to back for 10 s against an embedded 3-node R3 cluster, without
// local stores. It reports commits/s, events/s and the commit p99: the
// ceiling the sizing guide divides by a station's ≤ 10 commits/s per
// stream.
func BenchmarkCentreCommits(b *testing.B) {
	counts := []int{200, 1000}
	if s := os.Getenv("EDGE_CENTRE_STATIONS"); s != "" {
		counts = nil
		for f := range strings.SplitSeq(s, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
				counts = append(counts, n)
			}
		}
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("stations=%d", n), func(b *testing.B) {
			ctx0 := testCtx(b, 120*time.Second)
			nodes, err := central.StartLocalCluster(ctx0, b.TempDir(), "centre", 3, true, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, n := range nodes {
					n.Close()
				}
			}()
			var urls []string
			for _, n := range nodes {
				urls = append(urls, n.ClientURL())
			}
			js, _ := jetstream.New(connect(b, urls...))
			if _, err := js.CreateStream(ctx0, jetstream.StreamConfig{Name: wire.StreamName(testStream), Subjects: []string{"edge." + testStream + ".>"},
				Storage: jetstream.FileStorage, Replicas: 3, AllowAtomicPublish: true}); err != nil {
				b.Fatal(err)
			}
			recs := telemetryRecords(10)
			var lat latencies
			var commits, fails sync.Map
			sinks := make([]*JetStreamSink, n)
			for i := range n {
				nc := connect(b, urls[i%len(urls)])
				if sinks[i], err = NewJetStreamSink(nc, fmt.Sprintf("c-%04d", i), "bench", JetStreamOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			const run = 10 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			var wg sync.WaitGroup
			for i, sink := range sinks {
				wg.Go(func() {
					var prev Committed
					var ok, bad int
					for k := uint64(1); ctx.Err() == nil; k++ {
						txn := sink.Begin(testStream, prev.Record.Txn+1)
						for j := range recs {
							r := recs[j]
							r.Offset = k*10 + uint64(j)
							r.IngestTime = time.Now().UnixNano()
							txn.Add(ctx, r)
						}
						cut := localstream.StreamCut{Stream: testStream, Positions: map[localstream.SegmentID]uint64{0: k * 10}}
						start := time.Now()
						c, err := txn.Commit(ctx, prev, cut, watermark.Watermark{}, wire.CommitMeta{})
						if err != nil && ctx.Err() != nil {
							break // the run ended during the commit
						}
						if err != nil {
							bad++
							if c2, err := sink.LastCommitted(context.Background(), testStream); err == nil {
								prev = c2
							}
							continue
						}
						lat.add([]int64{start.UnixNano()})
						prev = c
						ok++
					}
					commits.Store(i, ok)
					fails.Store(i, bad)
				})
			}
			b.ResetTimer()
			wg.Wait()
			total, failed := 0, 0
			commits.Range(func(_, v any) bool { total += v.(int); return true })
			fails.Range(func(_, v any) bool { failed += v.(int); return true })
			b.ReportMetric(float64(total)/run.Seconds(), "commits/s")
			b.ReportMetric(float64(total*len(recs))/run.Seconds(), "events/s")
			b.ReportMetric(float64(lat.quantile(0.99))/1e6, "commit_p99_ms")
			b.ReportMetric(float64(failed), "failed_commits")
		})
	}
}

// telemetryRecords returns n JSON telemetry records of two drones, one
// segment, consecutive offsets.
func telemetryRecords(n int) []localstream.Record {
	out := make([]localstream.Record, n)
	for i := range out {
		d := fmt.Sprintf("drone-%d", i%2)
		out[i] = localstream.Record{Position: localstream.Position{Offset: uint64(i)}, Event: localstream.Event{
			RoutingKey: d, Writer: "telemetry/" + d, EventTime: 1_767_000_000_000_000_000 + int64(i)*1_000_000,
			IngestTime: 1_767_000_000_000_000_000 + int64(i)*1_000_100, ContentType: "application/json",
			Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}},
			Payload: fmt.Appendf(nil, `{"drone":%q,"seq":%d,"lat":47.%06d,"lon":8.%06d,"alt":%d}`, d, i, i*7919%1e6, i*104729%1e6, i%500),
		}}
	}
	return out
}
