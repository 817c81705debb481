package telemetry

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// slowAppender is the real stream, slowed: the agent stores slower than the
// drones publish, so the broker keeps a queue for it.
type slowAppender struct {
	*localstream.Stream
	d time.Duration
}

func (a slowAppender) AppendAsync(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error {
	time.Sleep(a.d)
	return a.Stream.AppendAsync(ctx, ev, cb, opts...)
}

// TestOrderKeptWhileTheBrokerQueues: the broker's in-flight window (20, the
// Mosquitto default) is far smaller than the agent's lanes, and the drones
// publish faster than the agent stores, so the broker queues for the
// connected agent the whole time and refills the window as PUBACKs come in.
// The agent must PUBACK in the order the messages were delivered (MQTT
// 3.1.1 4.6.0-2): Mosquitto 2.0.x, PUBACKed out of order, let a newly
// published message overtake the ones it had queued (it counts the window
// by list position), and a drone's telemetry landed out of order.
func TestOrderKeptWhileTheBrokerQueues(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Options{Dir: t.TempDir(), MaxInflight: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop() })
	if b.Embedded() {
		t.Log("mosquitto binary absent: the embedded broker has no such window; the test still checks order")
	}
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-order")
	subscribeOnce(t, b.URL(), cfg.ClientID, "drones/+/telemetry/#")
	const drones, n = 4, 1500
	simDone := make(chan error, 1)
	var queued atomic.Int64
	go func() {
		_, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, Window: 8, NoStatus: true,
			OnPublished: func(string, string, uint64, []byte) { queued.Add(1) }})
		simDone <- err
	}()
	// A backlog of five broker windows queues while the agent is away; the
	// drones go on publishing while it drains.
	testkit.WaitFor(t, 30*time.Second, "a backlog queued", func() bool { return queued.Load() >= 5*20 })
	t.Logf("%d messages queued when the agent starts", queued.Load())
	in, err := New(cfg, Sink{Stream: slowAppender{st, 300 * time.Microsecond}, Meta: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- in.Run(ctx) }()
	stop := func() error { cancel(); return <-errc }
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "all appended", func() bool { return in.Stats().Appended >= drones*n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if msg := verifyExactlyOnce(readAll(t, st), wantDrones(drones, n)); msg != "" {
		t.Fatal(msg)
	}
}
