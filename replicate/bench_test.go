package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// fillStore appends n events of size bytes to a fresh store's stream.
func fillStore(b *testing.B, stream string, n, size int) (*localstream.Store, *localstream.Stream, []localstream.Record) {
	b.Helper()
	store, err := localstream.Open(b.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.CreateStream(stream, localstream.StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d := fmt.Sprintf("d%d", i%8)
			if _, err := st.Append(context.Background(), localstream.Event{RoutingKey: d, Writer: stream + "/" + d, EventTime: time.Now().UnixNano(), IngestTime: time.Now().UnixNano(), ContentType: "application/octet-stream", Payload: payload}); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	tail := st.TailCut()
	rd, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		b.Fatal(err)
	}
	var recs []localstream.Record
	for {
		r, err := rd.TryNext()
		if err != nil {
			break
		}
		recs = append(recs, r)
	}
	return store, st, recs
}

// rawPublish sends recs as the agent would (same messages, same
// transaction bounds, commit record with the fencing expectation) with
// jetstreamext directly: no local store, no reader, no replicator.
func rawPublish(b *testing.B, nc *nats.Conn, stream, agent string, recs []localstream.Record, maxEvents int, maxBytes int64) {
	b.Helper()
	sink, err := NewJetStreamSink(nc, agent, "raw", JetStreamOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var prevSeq, txn uint64
	for i := 0; i < len(recs); {
		bp, _ := jetstreamext.NewBatchPublisher(sink.link.js, jetstreamext.BatchFlowControl{AckTimeout: 5 * time.Second})
		txn++
		var bytes int64
		n := 0
		for i < len(recs) && n < maxEvents && (n == 0 || bytes+int64(len(recs[i].Payload)) <= maxBytes) {
			if err := bp.AddMsg(wire.EncodeEvent(stream, agent, txn, recs[i])); err != nil {
				b.Fatal(err)
			}
			bytes += int64(len(recs[i].Payload))
			n++
			i++
		}
		rec := wire.NewCommitRecord(agent, stream, "raw", txn, localstream.StreamCut{Stream: stream, Positions: map[localstream.SegmentID]uint64{recs[i-1].Segment: recs[i-1].Offset + 1}}, watermark.Watermark{}, wire.CommitMeta{}, n, bytes, time.Now().UnixNano())
		data, _ := json.Marshal(rec)
		m := nats.NewMsg(wire.CutSubject(stream, agent))
		m.Data = data
		ack, err := bp.CommitMsg(ctx, m, jetstreamext.WithBatchExpectLastSequencePerSubject(prevSeq))
		if err != nil {
			b.Fatal(err)
		}
		prevSeq = ack.Sequence
	}
}

// BenchmarkReplicationThroughput replicates a pre-filled local stream to an
// embedded server, in each central layout, and, in the same run on the
// same server, publishes the same events as raw layout-1 atomic batches;
// it reports both rates, their ratio (target ≥ 0.8) and the process's CPU
// time per event while the agent replicated (agent and embedded server).
func BenchmarkReplicationThroughput(b *testing.B) {
	for _, layout := range []int{1, 2} {
		b.Run(fmt.Sprintf("layout=%d", layout), func(b *testing.B) { benchReplicationThroughput(b, layout) })
	}
}

func benchReplicationThroughput(b *testing.B, layout int) {
	for _, c := range []struct {
		name      string
		n, size   int
		stream    string
		maxEvents int
		maxBytes  int64
	}{
		{"telemetry-300B", 60000, 300, "telemetry", 0, 8 << 20},
		{"chunk-256KiB", 600, 256 << 10, "video", 0, 8 << 20},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := rigs.StartCentral(b, central.Config{})
			nc := connect(b, srv.ClientURL())
			var agentDur, rawDur, agentCPU time.Duration
			var bytesPer int64
			for i := range b.N {
				b.StopTimer()
				store, st, recs := fillStore(b, c.stream, c.n, c.size)
				bytesPer = int64(c.n * c.size)
				agent := fmt.Sprintf("bench-%d", i)
				inst := NewInstanceID()
				sink, _ := NewJetStreamSink(nc, agent, inst, JetStreamOptions{Layout: layout})
				if err := sink.Prepare(context.Background(), c.stream); err != nil {
					b.Fatal(err)
				}
				tail := st.TailCut()
				caughtUp := make(chan struct{})
				r := NewReplicator(st, sink, inst, ReplicatorConfig{MaxTxnEvents: c.maxEvents, MaxTxnBytes: c.maxBytes,
					OnCommit: func(cm Committed, _ []int64) {
						if cut, err := cm.Record.StreamCut(); err == nil && cut.Equal(tail) {
							close(caughtUp)
						}
					}})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				runAgent := func() {
					start, cpu0 := time.Now(), processCPU()
					go func() { done <- r.Run(ctx) }()
					<-caughtUp
					agentDur += time.Since(start)
					agentCPU += processCPU() - cpu0
					cancel()
					<-done
				}
				runRaw := func() {
					start := time.Now()
					rawPublish(b, nc, c.stream, agent+"-raw", recs, 999, c.maxBytes)
					rawDur += time.Since(start)
				}
				// Alternate the order so that neither side always runs on a
				// warmer (or fuller) server.
				b.StartTimer()
				if i%2 == 0 {
					runAgent()
					runRaw()
				} else {
					runRaw()
					runAgent()
				}
				b.StopTimer()
				store.Close()
			}
			n := float64(b.N * c.n)
			b.ReportMetric(n/agentDur.Seconds(), "agent_events/s")
			b.ReportMetric(float64(int64(b.N)*bytesPer)/agentDur.Seconds()/1e6, "agent_MB/s")
			b.ReportMetric(n/rawDur.Seconds(), "raw_events/s")
			b.ReportMetric(float64(int64(b.N)*bytesPer)/rawDur.Seconds()/1e6, "raw_MB/s")
			b.ReportMetric(rawDur.Seconds()/agentDur.Seconds(), "ratio_agent/raw")
			b.ReportMetric(float64(agentCPU.Microseconds())/n, "agent_cpu_µs/event")
		})
	}
}

// BenchmarkAppendToCommitted measures the latency from a durable local
// append (its ingest time) to the ack of the commit that holds it, at a
// steady telemetry rate with the default commit interval (100 ms).
func BenchmarkAppendToCommitted(b *testing.B) {
	srv := rigs.StartCentral(b, central.Config{})
	nc := connect(b, srv.ClientURL())
	var mu sync.Mutex
	var lat []time.Duration
	for i := range b.N {
		store, st := openStore(b, b.TempDir())
		inst := NewInstanceID()
		sink, _ := NewJetStreamSink(nc, fmt.Sprintf("lat-%d", i), inst, JetStreamOptions{})
		r := NewReplicator(st, sink, inst, ReplicatorConfig{OnCommit: func(_ Committed, ingest []int64) {
			now := time.Now()
			mu.Lock()
			for _, in := range ingest {
				lat = append(lat, now.Sub(time.Unix(0, in)))
			}
			mu.Unlock()
		}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		app := newAppender(st, 10)
		actx, acancel := context.WithTimeout(context.Background(), 3*time.Second)
		app.run(actx, 10*time.Millisecond, 10) // ~1000 events/s, 10 drones
		acancel()
		waitCaughtUpTB(b, nc, st, sink.Agent())
		cancel()
		<-done
		store.Close()
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no latency sample")
	}
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(p(0.5), "p50_ms")
	b.ReportMetric(p(0.99), "p99_ms")
	b.ReportMetric(p(1), "max_ms")
	b.ReportMetric(float64(len(lat)), "samples")
}

// BenchmarkRecoveryAfterLinkCut cuts the link (proxy refuses and drops
// connections) for 2 s under load, three times per op, and reports the
// time from the link's return to the first new commit (target ≤ 1 s in
// every round).
func BenchmarkRecoveryAfterLinkCut(b *testing.B) {
	srv := rigs.StartCentral(b, central.Config{})
	px := newFaultProxy(b, srv.ClientURL()[len("nats://"):])
	nc := connect(b, px.URL())
	store, st := openStore(b, b.TempDir())
	defer store.Close()
	inst := NewInstanceID()
	sink, _ := NewJetStreamSink(nc, "rec", inst, JetStreamOptions{})
	commits := make(chan time.Time, 1024)
	r := NewReplicator(st, sink, inst, ReplicatorConfig{OnCommit: func(Committed, []int64) {
		select {
		case commits <- time.Now():
		default:
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	app := newAppender(st, 10)
	go app.run(ctx, 5*time.Millisecond, 5)
	select { // steady state first
	case <-commits:
	case <-time.After(30 * time.Second):
		b.Fatal("no first commit")
	}
	var worst, total time.Duration
	rounds := 0
	for range b.N {
		for range 3 {
			px.SetDown(true)
			time.Sleep(2 * time.Second) // the outage measured, not a wait
			for len(commits) > 0 {
				<-commits
			}
			up := time.Now()
			px.SetDown(false)
			var at time.Time
			select {
			case at = <-commits:
			case <-time.After(30 * time.Second):
				b.Fatal("no commit within 30 s of the link's return")
			}
			d := at.Sub(up)
			worst = max(worst, d)
			total += d
			rounds++
		}
	}
	b.ReportMetric(float64(worst)/1e6, "worst_recovery_ms")
	b.ReportMetric(float64(total)/float64(rounds)/1e6, "mean_recovery_ms")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func waitCaughtUpTB(b *testing.B, nc *nats.Conn, st *localstream.Stream, agent string) {
	b.Helper()
	waitCaughtUp(b, nc, st, agent, 60*time.Second)
}

// BenchmarkLoweredBatchLimits measures layout-1 replication of a 20,000
// event backlog (300 B telemetry) on a server with nats-server's default
// batch limits and on one lowered to 100 messages per batch and one open
// batch per stream: the cost of learning and keeping the lowered limits
// (smaller transactions, no pipelining).
func BenchmarkLoweredBatchLimits(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  central.Config
	}{
		{"server-defaults", central.Config{}},
		{"batch100-inflight1", central.Config{MaxBatchSize: 100, MaxBatchInflightPerStream: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := rigs.StartCentral(b, c.cfg)
			nc := connect(b, srv.ClientURL())
			var dur time.Duration
			var retries uint64
			for i := range b.N {
				b.StopTimer()
				store, st, _ := fillStore(b, "telemetry", 20000, 300)
				inst := NewInstanceID()
				sink, _ := NewJetStreamSink(nc, fmt.Sprintf("low-%d", i), inst, JetStreamOptions{Layout: 1})
				tail := st.TailCut()
				caughtUp := make(chan struct{})
				r := NewReplicator(st, sink, inst, ReplicatorConfig{OnCommit: func(cm Committed, _ []int64) {
					if cut, err := cm.Record.StreamCut(); err == nil && cut.Equal(tail) {
						close(caughtUp)
					}
				}})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.StartTimer()
				start := time.Now()
				go func() { done <- r.Run(ctx) }()
				<-caughtUp
				dur += time.Since(start)
				b.StopTimer()
				retries += r.Stats().Retries
				cancel()
				<-done
				sink.Close()
				store.Close()
			}
			b.ReportMetric(float64(b.N*20000)/dur.Seconds(), "events/s")
			b.ReportMetric(float64(retries)/float64(b.N), "retries/op")
		})
	}
}
