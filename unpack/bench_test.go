package unpack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
)

// fillStream appends n events of size bytes over 8 drones to a fresh
// store's test stream.
func fillStream(b *testing.B, n, size int) *localstream.Stream {
	b.Helper()
	s, err := localstream.Open(b.TempDir(), localstream.Options{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	st, err := s.CreateStream(testStream, localstream.StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	// Payloads as the streams carry them: telemetry JSON (compresses),
	// video chunks random (does not).
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	if size <= 1024 {
		payload = fmt.Appendf(nil, `{"drone":"d","seq":%d,"lat":%.6f,"lon":%.6f,"alt":%.2f,"pad":"%s"}`, 1, 52.1, 4.3, 120.0, strings.Repeat("x", max(size-80, 0)))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d := fmt.Sprintf("d%d", i%8)
			now := time.Now().UnixNano()
			if _, err := st.Append(context.Background(), localstream.Event{RoutingKey: d, Writer: testStream + "/" + d, EventTime: now, IngestTime: now,
				ContentType: "application/json", Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}}, Payload: payload}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	return st
}

// BenchmarkUnpackVsReplication: on one embedded server, an agent
// replicates a pre-filled local stream (layout 2, the default), then the
// unpacker turns what it wrote into one message per event. It reports
// both rates in events per second and their ratio (target ≥ 1: the
// centre keeps up with an agent replicating flat out), and the process's
// CPU per event in each phase (server included), the steadier figure on
// a shared machine. A third phase measures the floor: the server alone
// storing the same derived messages, built beforehand and published
// with no ack and no fence into a stream like the derived one; no
// unpacker can be faster than that.
func BenchmarkUnpackVsReplication(b *testing.B) {
	for _, c := range []struct {
		name    string
		n, size int
	}{{"telemetry-300B", 60000, 300}, {"chunk-256KiB", 300, 256 << 10}} {
		b.Run(c.name, func(b *testing.B) { benchUnpack(b, c.n, c.size) })
	}
}

func benchUnpack(b *testing.B, n, size int) {
	srv := testkit.StartCentral(b, central.Config{})
	var repDur, unpDur, floorDur, repCPU, unpCPU, floorCPU time.Duration
	for i := range b.N {
		b.StopTimer()
		st := fillStream(b, n, size)
		nc := connect(b, srv.ClientURL())
		agent := fmt.Sprintf("bench-%d", i)
		inst := replicate.NewInstanceID()
		sink, err := replicate.NewJetStreamSink(nc, agent, inst, replicate.JetStreamOptions{})
		if err != nil {
			b.Fatal(err)
		}
		tail := st.TailCut()
		caughtUp := make(chan struct{})
		var once sync.Once
		r := replicate.NewReplicator(st, sink, inst, replicate.ReplicatorConfig{OnCommit: func(cm replicate.Committed, _ []int64) {
			if cut, err := cm.Record.StreamCut(); err == nil && cut.Equal(tail) {
				once.Do(func() { close(caughtUp) })
			}
		}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		before := derivedLast(nc, testStream)
		b.StartTimer()
		start := time.Now()
		c0 := cpuNow()
		go func() { done <- r.Run(ctx) }()
		<-caughtUp
		repDur += time.Since(start)
		repCPU += cpuNow() - c0
		b.StopTimer()
		cancel()
		<-done
		sink.Close()

		u, err := New(nc, testStream, Options{Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		uctx, ucancel := context.WithCancel(context.Background())
		udone := make(chan error, 1)
		b.StartTimer()
		start = time.Now()
		c0 = cpuNow()
		go func() { udone <- u.Run(uctx) }()
		for u.Stats().DerivedSeq < before+uint64(n) {
			time.Sleep(time.Millisecond)
		}
		unpDur += time.Since(start)
		unpCPU += cpuNow() - c0
		b.StopTimer()
		ucancel()
		if err := <-udone; err != nil {
			b.Fatal(err)
		}

		msgs := floorMsgs(b, nc, before, n)
		js, _ := jetstream.New(nc)
		fl, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: fmt.Sprintf("FLOOR_%d", i),
			Subjects: []string{fmt.Sprintf("floor%d.>", i)}, Storage: jetstream.FileStorage, AllowAtomicPublish: true, AllowBatchPublish: true})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			m.Subject = fmt.Sprintf("floor%d.%s", i, m.Subject)
		}
		b.StartTimer()
		start = time.Now()
		c0 = cpuNow()
		for _, m := range msgs {
			if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		for {
			info, err := fl.Info(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if info.State.Msgs >= uint64(n) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		floorDur += time.Since(start)
		floorCPU += cpuNow() - c0
		b.StopTimer()
	}
	total := float64(b.N * n)
	b.ReportMetric(total/repDur.Seconds(), "replication_events/s")
	b.ReportMetric(total/unpDur.Seconds(), "unpack_events/s")
	b.ReportMetric(repDur.Seconds()/unpDur.Seconds(), "ratio_unpack/replication")
	b.ReportMetric(float64(repCPU.Microseconds())/total, "rep_cpu_us/ev")
	b.ReportMetric(float64(unpCPU.Microseconds())/total, "unp_cpu_us/ev")
	b.ReportMetric(total/floorDur.Seconds(), "floor_events/s")
	b.ReportMetric(repDur.Seconds()/floorDur.Seconds(), "ratio_floor/replication")
	b.ReportMetric(float64(floorCPU.Microseconds())/total, "floor_cpu_us/ev")
}

// floorMsgs reads the n derived messages after sequence after, without
// the server's own headers, for the floor phase.
func floorMsgs(b *testing.B, nc *nats.Conn, after uint64, n int) []*nats.Msg {
	b.Helper()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, DerivedStreamName(testStream))
	if err != nil {
		b.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1})
	if err != nil {
		b.Fatal(err)
	}
	out := make([]*nats.Msg, 0, n)
	for len(out) < n {
		batch, err := cons.Fetch(min(n-len(out), 500), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			h := nats.Header{}
			for k, v := range m.Headers() {
				if !strings.HasPrefix(k, "Nats-") {
					h[k] = v
				}
			}
			out = append(out, &nats.Msg{Subject: m.Subject(), Header: h, Data: m.Data()})
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// cpuNow is the process's user and system CPU time so far.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
