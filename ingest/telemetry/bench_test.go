package telemetry

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/broker"
)

// benchMsgs is the messages per drone of one benchmark pass (EDGE_BENCH_MSGS).
func benchMsgs() int {
	if v, err := strconv.Atoi(os.Getenv("EDGE_BENCH_MSGS")); err == nil && v > 0 {
		return v
	}
	return 5000
}

const benchDrones = 4

// consumer is one side of the comparison: it starts consuming as client and
// returns a counter of messages done (acked) and a stop function.
type consumer func(b *testing.B, url, client string) (done *atomic.Uint64, stop func())

// bareConsumer is the ceiling: a paho subscriber with the agent's session
// settings that acks each message as it arrives and does nothing else.
func bareConsumer(b *testing.B, url, client string) (*atomic.Uint64, func()) {
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
func storeConsumer(b *testing.B, url, client string) (*atomic.Uint64, func()) {
	s, st := openStore(b, b.TempDir())
	in, err := New(testConfig(url, client), Sink{Stream: st, Meta: s})
	if err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- in.Run(context.Background()) }()
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
	for in.Stats().Connects == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	return &n, func() {
		close(quit)
		in.Close()
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
	defer stop()
	start := time.Now()
	if _, err := Simulate(context.Background(), SimConfig{Broker: br.URL(), Drones: benchDrones, Count: benchMsgs(),
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
	if _, err := Simulate(context.Background(), SimConfig{Broker: br.URL(), Drones: benchDrones, Count: benchMsgs(),
		Window: 64, NoStatus: true, ClientPrefix: client + "-sim-"}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	done, stop := c(b, br.URL(), client)
	defer stop()
	waitDone(b, done, total)
	return float64(total) / time.Since(start).Seconds()
}

func waitDone(b *testing.B, done *atomic.Uint64, total uint64) {
	deadline := time.Now().Add(2 * time.Minute)
	for done.Load() < total {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d after 2 minutes", done.Load(), total)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkTelemetryIngest compares, in the same run and against the same
// mosquitto, the agent (QoS 1, ack after the fsync'd append) with a bare
// paho subscriber that only acks: live (simulator publishing as fast as it
// can) and drain (a queued backlog). Reported: msgs/s of each and the ratio.
func BenchmarkTelemetryIngest(b *testing.B) {
	inflight, _ := strconv.Atoi(os.Getenv("EDGE_BENCH_INFLIGHT"))
	br, err := broker.Start(context.Background(), broker.Options{Dir: b.TempDir(), MaxInflight: inflight})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Stop()
	only := os.Getenv("EDGE_BENCH_ONLY") // live, drain, storedrain (for profiling); default both
	var bareLive, storeLive, bareDrain, storeDrain float64
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench-%d-%d", os.Getpid(), i)
		if only == "" || only == "live" {
			bareLive += livePass(b, br, bareConsumer, id+"-bl")
			storeLive += livePass(b, br, storeConsumer, id+"-sl")
		}
		if only == "" || only == "drain" {
			bareDrain += drainPass(b, br, bareConsumer, id+"-bd")
			storeDrain += drainPass(b, br, storeConsumer, id+"-sd")
		}
		if only == "storedrain" {
			storeDrain += drainPass(b, br, storeConsumer, id+"-sd")
		}
	}
	n := float64(b.N)
	b.ReportMetric(bareLive/n, "bare_live_msgs/s")
	b.ReportMetric(storeLive/n, "store_live_msgs/s")
	b.ReportMetric(storeLive/bareLive, "live_ratio")
	b.ReportMetric(bareDrain/n, "bare_drain_msgs/s")
	b.ReportMetric(storeDrain/n, "store_drain_msgs/s")
	b.ReportMetric(storeDrain/bareDrain, "drain_ratio")
}
