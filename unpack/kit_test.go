package unpack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

const testStream = "telemetry"

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func connect(t testing.TB, urls ...string) *nats.Conn {
	t.Helper()
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: urls, Name: "unpack-test"}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// droneMsg is the payload the test agents append.
type droneMsg struct {
	Drone string `json:"drone"`
	Seq   int    `json:"seq"`
}

// testAgent is one agent: a real Badger store with the test stream, its
// watermark tracker, an appender of numbered events per drone, and a
// replicator to the centre.
type testAgent struct {
	id     string
	store  *localstream.Store
	st     *localstream.Stream
	tr     *watermark.Tracker
	drones int
	// next[d] is drone d's next sequence number (from 1).
	next []int
	mu   sync.Mutex
	sent atomic.Int64
	base int64
}

func newTestAgent(t testing.TB, id string, drones int) *testAgent {
	t.Helper()
	s, err := localstream.Open(t.TempDir(), localstream.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.CreateStream(testStream, localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := watermark.NewTracker(st, s, watermark.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return &testAgent{id: id, store: s, st: st, tr: tr, drones: drones, next: make([]int, drones), base: time.Now().UnixNano()}
}

// appendRound appends one event per drone, each drone in order.
func (a *testAgent) appendRound() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for d := range a.drones {
		a.next[d]++
		key := fmt.Sprintf("drone.%d/%s", d, a.id) // '.' and '/' are escaped in subjects
		et := a.base + a.sent.Add(1)*1000
		payload, _ := json.Marshal(droneMsg{Drone: key, Seq: a.next[d]})
		ev := localstream.Event{RoutingKey: key, Writer: "telemetry/" + key, EventTime: et, IngestTime: time.Now().UnixNano(),
			ContentType: "application/json", Payload: payload,
			Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + key + "/telemetry"}, {Key: "qos", Value: "1"}}}
		if a.next[d]%50 == 0 {
			ev.Flags |= localstream.FlagDiscontinuity
		}
		pos, err := a.st.Append(context.Background(), ev)
		if err != nil {
			return err
		}
		if err := a.tr.Note(ev.Writer, ev.EventTime, pos); err != nil {
			return err
		}
	}
	return nil
}

// run appends rounds every interval until ctx ends.
func (a *testAgent) run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := a.appendRound(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// replicate runs the agent's replicator on nc (layout 2, the default)
// until the returned stop is called.
func (a *testAgent) replicate(t testing.TB, nc *nats.Conn, jsOpts replicate.JetStreamOptions) (r *replicate.Replicator, stop func()) {
	t.Helper()
	inst := replicate.NewInstanceID()
	sink, err := replicate.NewJetStreamSink(nc, a.id, inst, jsOpts)
	if err != nil {
		t.Fatal(err)
	}
	r = replicate.NewReplicator(a.st, sink, inst, replicate.ReplicatorConfig{Watermark: replicate.TrackerWatermark(a.tr, nil),
		CommitInterval: 20 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replicator %s: %v", a.id, err)
			}
			sink.Close()
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// waitReplicated waits until the centre holds the agent's whole local
// stream.
func (a *testAgent) waitReplicated(t testing.TB, r *replicate.Replicator, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := r.WaitCaughtUp(ctx); err != nil {
		t.Fatalf("agent %s not caught up: %v", a.id, err)
	}
}

// sourceEvents reads every event of the source stream in order.
func sourceEvents(t testing.TB, nc *nats.Conn, stream string) []wire.CentralEvent {
	t.Helper()
	out, err := readSource(nc, stream)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readSource is sourceEvents' read, its error returned.
func readSource(nc *nats.Conn, stream string) ([]wire.CentralEvent, error) {
	items, err := centralread.ReadAll(context.Background(), nc, stream, centralread.ReadOptions{})
	if err != nil {
		return nil, err
	}
	var out []wire.CentralEvent
	for _, it := range items {
		if it.Kind == centralread.ItemEvent {
			out = append(out, it.Event)
		}
	}
	return out, nil
}

// waitSource reads the source until it holds total events (what the
// agents appended), and returns them. A read that comes back short while
// the centre holds them all is logged: centralread.ReadAll has been seen to stop
// early now and then.
func waitSource(t testing.TB, nc *nats.Conn, stream string, total int) []wire.CentralEvent {
	t.Helper()
	var src []wire.CentralEvent
	short := -1
	var lastErr error
	// Each check reads the whole source: every 100 ms, as before. A
	// cluster that has just lost a leader answers "JetStream system
	// temporarily unavailable" (503) for a while: read again.
	if !testkit.UntilEvery(60*time.Second, 100*time.Millisecond, func() bool {
		var err error
		if src, err = readSource(nc, stream); err != nil {
			if lastErr == nil || err.Error() != lastErr.Error() {
				t.Logf("a read of the source: %v (reading again)", err)
			}
			lastErr = err
			return false
		}
		if len(src) != total && len(src) != short {
			short = len(src)
			t.Logf("a read of the source returned %d events of %d", len(src), total)
		}
		return len(src) == total
	}) {
		t.Fatalf("the source holds %d events, the agents appended %d (the last read's error: %v)", len(src), total, lastErr)
	}
	return src
}

// derivedEvents reads the whole derived stream in order (with each
// message's sequence) and decodes it.
func derivedEvents(t testing.TB, nc *nats.Conn, stream string) ([]Event, []uint64) {
	t.Helper()
	evs, seqs, _ := readDerived(t, nc, Partition{Stream: stream})
	return evs, seqs
}

// readDerived reads a partition's whole derived stream in order (with
// each message's sequence and subject) and decodes it.
func readDerived(t testing.TB, nc *nats.Conn, p Partition) (out []Event, seqs []uint64, subjects []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, p.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	last := st.CachedInfo().State.LastSeq
	if last == 0 {
		return nil, nil, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			md, _ := m.Metadata()
			ev, err := Decode(m.Subject(), m.Headers(), m.Data())
			if err != nil {
				t.Fatalf("derived seq %d: %v", md.Sequence.Stream, err)
			}
			out = append(out, ev)
			seqs = append(seqs, md.Sequence.Stream)
			subjects = append(subjects, m.Subject())
			if md.Sequence.Stream >= last {
				return out, seqs, subjects
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: read %d of %d", p.StreamName(), len(seqs), last)
		}
	}
}

// verifyDerived checks that the derived stream is the source's events,
// each once, in the source's order (so per drone in order), with the
// same content, and that every agent's drones count 1..n without a gap
// (want: agent → drone key → n). It returns the number of events.
func verifyDerived(t testing.TB, nc *nats.Conn, stream string, want map[string]map[string]int) int {
	t.Helper()
	return verifyPartitions(t, nc, stream, 1, want)
}

// verifyPartitions checks verifyDerived's properties over the n
// partitions of the stream: partition i holds, on its agents' subjects,
// the source events of the agents PartitionOf puts in i, each once, in
// the source's order; together they hold every source event.
func verifyPartitions(t testing.TB, nc *nats.Conn, stream string, n int, want map[string]map[string]int) int {
	t.Helper()
	total := -1
	for _, ds := range want {
		total = max(total, 0)
		for _, c := range ds {
			total += c
		}
	}
	var src []wire.CentralEvent
	if total >= 0 {
		src = waitSource(t, nc, stream, total)
	} else {
		src = sourceEvents(t, nc, stream)
	}
	all := src
	var events int
	got := map[string]map[string]int{}
	for _, p := range Partitions(stream, n) {
		var src []wire.CentralEvent
		for _, e := range all {
			if PartitionOf(e.Agent, n) == p.Index {
				src = append(src, e)
			}
		}
		der, seqs, subjects := readDerived(t, nc, p)
		for i, d := range der {
			if want := p.EventSubject(d.Agent, d.Record.RoutingKey); subjects[i] != want {
				t.Fatalf("%s seq %d on %q, want %q (agent %q)", p, seqs[i], subjects[i], want, d.Agent)
			}
		}
		checkDerivedSource(t, p, der, seqs, src, got)
		events += len(der)
	}
	if want != nil && fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("per drone counts %v, want %v", got, want)
	}
	return events
}

// checkDerivedSource checks one derived stream (der, at seqs) against
// the source events it must hold, and counts per agent and drone into
// got, each drone's numbers continuing from got's.
func checkDerivedSource(t testing.TB, p Partition, der []Event, seqs []uint64, src []wire.CentralEvent, got map[string]map[string]int) {
	t.Helper()
	if len(seqs) > 0 && seqs[len(seqs)-1]-seqs[0]+1 != uint64(len(seqs)) {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] != seqs[i-1]+1 {
				t.Logf("gap after derived seq %d: next %d", seqs[i-1], seqs[i])
			}
		}
	}
	if len(der) != len(src) {
		type key struct {
			agent string
			pos   localstream.Position
		}
		ds, ss := map[key]int{}, map[key]int{}
		for _, d := range der {
			ds[key{d.Agent, d.Record.Position}]++
		}
		for _, e := range src {
			ss[key{e.Agent, e.Record.Position}]++
		}
		for k, n := range ds {
			if n != ss[k] {
				t.Logf("%v: derived %d, source %d", k, n, ss[k])
			}
		}
		for k, n := range ss {
			if ds[k] == 0 {
				t.Logf("%v: derived 0, source %d", k, n)
			}
		}
		t.Fatalf("%s has %d events, source %d", p, len(der), len(src))
	}
	for i, d := range der {
		s := src[i]
		if seqs[i] != seqs[0]+uint64(i) {
			t.Fatalf("derived sequences not contiguous at %d: %d", i, seqs[i])
		}
		if d.Agent != s.Agent || d.Record.Position != s.Record.Position || d.Txn != s.Txn || d.Seq != s.Seq ||
			d.Record.RoutingKey != s.Record.RoutingKey || string(d.Record.Payload) != string(s.Record.Payload) ||
			d.Record.Flags != s.Record.Flags || d.Record.Writer != s.Record.Writer || d.Record.EventTime != s.Record.EventTime ||
			d.Record.ContentType != s.Record.ContentType || fmt.Sprint(d.Record.Headers) != fmt.Sprint(s.Record.Headers) {
			t.Fatalf("derived event %d differs from the source's:\n%+v\n%+v", i, d.CentralEvent, s)
		}
	}
	for i, d := range der {
		var m droneMsg
		if err := json.Unmarshal(d.Record.Payload, &m); err != nil {
			t.Fatal(err)
		}
		if got[d.Agent] == nil {
			got[d.Agent] = map[string]int{}
		}
		if m.Drone != d.Record.RoutingKey || m.Seq != got[d.Agent][m.Drone]+1 {
			t.Fatalf("derived event %d: agent %s drone %s seq %d after %d", i, d.Agent, m.Drone, m.Seq, got[d.Agent][m.Drone])
		}
		got[d.Agent][m.Drone] = m.Seq
	}
}

// total is the number of events the agents appended.
func total(agents ...*testAgent) int {
	n := 0
	for _, a := range agents {
		for _, c := range a.counts() {
			n += c
		}
	}
	return n
}

// counts returns what the agent appended: drone key → n.
func (a *testAgent) counts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for d, n := range a.next {
		if n > 0 {
			out[fmt.Sprintf("drone.%d/%s", d, a.id)] = n
		}
	}
	return out
}

// startUnpacker runs an unpacker in this process until the test ends.
func startUnpacker(t testing.TB, nc *nats.Conn, opts Options) (*Unpacker, func() error) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	u, err := New(nc, testStream, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	var once sync.Once
	var rerr error
	stop := func() error {
		once.Do(func() { cancel(); rerr = <-done })
		return rerr
	}
	t.Cleanup(func() { stop() })
	return u, stop
}

// derivedLast is the derived stream's last sequence (0 when missing).
func derivedLast(nc *nats.Conn, stream string) uint64 {
	return partitionLast(nc, Partition{Stream: stream})
}

// partitionLast is a partition's last sequence (0 when missing).
func partitionLast(nc *nats.Conn, p Partition) uint64 {
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, p.StreamName())
	if err != nil {
		return 0
	}
	return st.CachedInfo().State.LastSeq
}

// partitionsLast is the sum of the n partitions' last sequences.
func partitionsLast(nc *nats.Conn, stream string, n int) uint64 {
	var sum uint64
	for _, p := range Partitions(stream, n) {
		sum += partitionLast(nc, p)
	}
	return sum
}

// fleet is a set of test agents replicating to a centre, each appending
// a round every interval until stop.
type fleet struct {
	agents []*testAgent
	reps   []*replicate.Replicator
	cancel context.CancelFunc
	done   chan error
}

// runFleet starts each agent's replicator on its connection (conns(a))
// and its appends, every interval.
func runFleet(t testing.TB, agents []*testAgent, conns func(*testAgent) *nats.Conn, jsOpts replicate.JetStreamOptions, interval time.Duration) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fleet{agents: agents, cancel: cancel, done: make(chan error, len(agents))}
	for _, a := range agents {
		r, _ := a.replicate(t, conns(a), jsOpts)
		f.reps = append(f.reps, r)
		go func() { f.done <- a.run(ctx, interval) }()
	}
	return f
}

// stop ends the appends, waits (up to d each) until every agent's store
// is at the centre, and returns what they appended: agent → drone → n.
func (f *fleet) stop(t testing.TB, d time.Duration) map[string]map[string]int {
	t.Helper()
	f.cancel()
	for range f.agents {
		if err := <-f.done; err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]int{}
	for i, a := range f.agents {
		a.waitReplicated(t, f.reps[i], d)
		want[a.id] = a.counts()
	}
	return want
}

// clusterRig is an R3 cluster of three nodes in this process and a fleet
// replicating to it (R3 streams) through a link proxy per agent and node.
type clusterRig struct {
	nodes   []*central.Server
	urls    []string
	nc      *nats.Conn
	proxies []*testkit.Proxy
	*fleet
}

// startClusterRig starts the cluster (named name) and the agents'
// replication and appends, every interval.
func startClusterRig(t *testing.T, name string, agents []*testAgent, interval time.Duration) *clusterRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, err := central.StartLocalCluster(ctx, t.TempDir(), name, 3, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.Close()
		}
	})
	r := &clusterRig{nodes: nodes}
	for _, nd := range nodes {
		r.urls = append(r.urls, nd.ClientURL())
	}
	r.nc = connect(t, r.urls...)
	r.fleet = runFleet(t, agents, func(*testAgent) *nats.Conn {
		var purls []string
		for _, u := range r.urls {
			p := testkit.NewProxy(t, strings.TrimPrefix(u, "nats://"), testkit.ProxyHooks{})
			r.proxies = append(r.proxies, p)
			purls = append(purls, "nats://"+p.Addr())
		}
		return connect(t, purls...)
	}, replicate.JetStreamOptions{Replicas: 3}, interval)
	return r
}

// cuts is the number of connections the proxies cut.
func (r *clusterRig) cuts() int64 {
	var n int64
	for _, p := range r.proxies {
		n += p.Cuts()
	}
	return n
}
