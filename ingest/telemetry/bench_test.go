package telemetry

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// benchMsgs is the messages per drone of one benchmark pass (EDGE_BENCH_MSGS).
func benchMsgs() int {
	if v, err := strconv.Atoi(os.Getenv("EDGE_BENCH_MSGS")); err == nil && v > 0 {
		return v
	}
	return 3000
}

// benchPairs is the pairs of passes per benchmark iteration (EDGE_BENCH_PAIRS):
// `make bench` runs one iteration, and one pair alone is at the mercy of the
// other processes on a 2-core box.
func benchPairs() int {
	if v, err := strconv.Atoi(os.Getenv("EDGE_BENCH_PAIRS")); err == nil && v > 0 {
		return v
	}
	return 5
}

const benchDrones = 4

// consumer is one side of the comparison: it starts consuming as client and
// returns a counter of messages done (acked) and a stop function.
type consumer func(b testing.TB, url, client string) (done *atomic.Uint64, stop func())

// bareConsumer is the ceiling: a paho subscriber with the agent's session
// settings that acks each message as it arrives and does nothing else.
func bareConsumer(b testing.TB, url, client string) (*atomic.Uint64, func()) {
	var n atomic.Uint64
	o := paho.NewClientOptions().AddBroker(url).SetClientID(client).SetCleanSession(false).
		SetAutoAckDisabled(true).SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { m.Ack(); n.Add(1) })
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	if tok := c.Subscribe("drones/+/telemetry/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	return &n, func() { c.Disconnect(100) }
}

// storeConsumer is the agent: ingester into a durable (fsync'd) store.
func storeConsumer(b testing.TB, url, client string) (*atomic.Uint64, func()) {
	s, st := openStore(b, b.TempDir())
	in, err := New(testConfig(url, client), Sink{Stream: st, Meta: s})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- in.Run(ctx) }()
	var n atomic.Uint64
	quit := make(chan struct{})
	go func() {
		for {
			n.Store(in.Stats().Appended)
			select {
			case <-quit:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	testkit.WaitFor(b, time.Minute, "the agent connected", func() bool { return in.Stats().Connects > 0 })
	return &n, func() {
		close(quit)
		cancel()
		if err := <-errc; err != nil {
			b.Error(err)
		}
		s.Close()
	}
}

// livePass: the consumer runs while the simulator publishes as fast as the
// broker acks; the rate is messages / (first publish → last ack by the consumer).
func livePass(b *testing.B, br *broker.Broker, c consumer, client string) float64 {
	total := uint64(benchDrones * benchMsgs())
	done, stop := c(b, br.URL(), client)
	defer dropSession(b, br.URL(), client)
	defer stop()
	start := time.Now()
	if _, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: br.URL(), Drones: benchDrones, Count: benchMsgs(),
		Window: 64, NoStatus: true, ClientPrefix: client + "-sim-"}); err != nil {
		b.Fatal(err)
	}
	waitDone(b, done, total)
	return float64(total) / time.Since(start).Seconds()
}

// drainPass: the backlog is queued in the broker first; the rate is how fast
// the consumer drains it (its own capacity, not the publisher's).
func drainPass(b *testing.B, br *broker.Broker, c consumer, client string) float64 {
	total := uint64(benchDrones * benchMsgs())
	subscribeOnce(b, br.URL(), client, "drones/+/telemetry/#")
	if _, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: br.URL(), Drones: benchDrones, Count: benchMsgs(),
		Window: 64, NoStatus: true, ClientPrefix: client + "-sim-"}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	done, stop := c(b, br.URL(), client)
	defer dropSession(b, br.URL(), client)
	defer stop()
	waitDone(b, done, total)
	return float64(total) / time.Since(start).Seconds()
}

// dropSession removes client's persistent session from the broker, so
// that finished passes do not keep collecting copies of later passes.
func dropSession(b testing.TB, url, client string) {
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(client).SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("drop session: %v", tok.Error())
	}
	c.Disconnect(50)
}

func waitDone(b *testing.B, done *atomic.Uint64, total uint64) {
	deadline := time.Now().Add(2 * time.Minute)
	for done.Load() < total {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d after 2 minutes", done.Load(), total)
		}
		time.Sleep(time.Millisecond) // polled every 1 ms, not testkit's 5: the elapsed time is the figure
	}
}

// BenchmarkTelemetryIngest compares, in the same run and against the same
// mosquitto, the agent (QoS 1, ack after the fsync'd append) with a bare
// paho subscriber that only acks: live (the simulator publishing as fast as
// the broker acks, 4 drones, 64 in flight each) and drain (a backlog queued
// in the broker first, then consumed). Each iteration runs one pair of each,
// alternating which side goes first; the ratios reported are the medians of
// the per-pair ratios (robust on a busy 2-core box), the rates are means.
// EDGE_BENCH_MSGS sets the messages per drone and pass (default 3000),
// EDGE_BENCH_PAIRS the pairs per iteration (default 5).
func BenchmarkTelemetryIngest(b *testing.B) {
	inflight, _ := strconv.Atoi(os.Getenv("EDGE_BENCH_INFLIGHT"))
	br, err := broker.Start(context.Background(), broker.Options{Dir: b.TempDir(), MaxInflight: inflight})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Stop()
	only := os.Getenv("EDGE_BENCH_ONLY") // live, drain, storelive, storedrain (for profiling); default both
	var bareLive, storeLive, bareDrain, storeDrain []float64
	pair := func(pass func(*testing.B, *broker.Broker, consumer, string) float64, id string, first bool, bare, store *[]float64) {
		t0 := time.Now()
		defer func() {
			if os.Getenv("EDGE_BENCH_VERBOSE") != "" {
				b.Logf("%s: %v", id, time.Since(t0))
			}
		}()
		if first {
			*bare = append(*bare, pass(b, br, bareConsumer, id+"-b"))
			*store = append(*store, pass(b, br, storeConsumer, id+"-s"))
		} else {
			*store = append(*store, pass(b, br, storeConsumer, id+"-s"))
			*bare = append(*bare, pass(b, br, bareConsumer, id+"-b"))
		}
	}
	for i := 0; i < b.N*benchPairs(); i++ {
		id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		switch only {
		case "storelive":
			storeLive = append(storeLive, livePass(b, br, storeConsumer, id+"-sl"))
		case "storedrain":
			storeDrain = append(storeDrain, drainPass(b, br, storeConsumer, id+"-sd"))
		}
		if only == "" || only == "live" {
			pair(livePass, id+"-l", i%2 == 0, &bareLive, &storeLive)
		}
		if only == "" || only == "drain" {
			pair(drainPass, id+"-d", i%2 == 1, &bareDrain, &storeDrain)
		}
	}
	report := func(kind string, bare, store []float64) {
		if len(store) == 0 {
			return
		}
		b.ReportMetric(mean(store), "store_"+kind+"_msgs/s")
		if len(bare) == len(store) {
			ratios := make([]float64, len(bare))
			for i := range bare {
				ratios[i] = store[i] / bare[i]
			}
			b.ReportMetric(mean(bare), "bare_"+kind+"_msgs/s")
			b.ReportMetric(median(ratios), kind+"_ratio")
		}
	}
	report("live", bareLive, storeLive)
	report("drain", bareDrain, storeDrain)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func median(v []float64) float64 {
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}
