package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// startBroker starts a real mosquitto (or says that it fell back).
func startBroker(t testing.TB) *broker.Broker {
	t.Helper()
	b, err := broker.Start(context.Background(), broker.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if b.Embedded() {
		t.Log("mosquitto binary absent: using the embedded mochi-mqtt broker")
	}
	t.Cleanup(func() { b.Stop() })
	return b
}

// openStore opens a real Badger store and its telemetry stream.
func openStore(t testing.TB, dir string) (*localstream.Store, *localstream.Stream) {
	t.Helper()
	return rigs.OpenStream(t, dir, localstream.Options{}, "telemetry", localstream.StreamConfig{})
}

// readAll returns every durable record of the stream, in reader order.
func readAll(t testing.TB, st *localstream.Stream) []localstream.Record {
	t.Helper()
	recs, err := st.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// verifyExactlyOnce checks that the records hold, for each drone in want,
// seqs 1..want[drone] exactly once and in order. Gap markers (a refused
// drone's, refused.go) are not telemetry and are passed over. It returns a
// description of the first violation, or "".
func verifyExactlyOnce(recs []localstream.Record, want map[string]uint64) string {
	next := map[string]uint64{}
	for _, rec := range recs {
		if rec.Flags.Has(localstream.FlagGap) {
			continue
		}
		var m mqttsim.Telemetry
		if err := json.Unmarshal(rec.Payload, &m); err != nil {
			return fmt.Sprintf("record %s: not simulator JSON: %v", rec.Position, err)
		}
		if m.Drone != rec.RoutingKey {
			return fmt.Sprintf("record %s: drone %q under routing key %q", rec.Position, m.Drone, rec.RoutingKey)
		}
		exp := next[m.Drone] + 1
		if m.Seq != exp {
			kind := "gap or reorder"
			if m.Seq < exp {
				kind = "duplicate or reorder"
			}
			return fmt.Sprintf("drone %s: %s: seq %d at %s, want %d", m.Drone, kind, m.Seq, rec.Position, exp)
		}
		next[m.Drone] = m.Seq
	}
	for d, n := range want {
		if next[d] != n {
			return fmt.Sprintf("drone %s: stored up to seq %d, want %d", d, next[d], n)
		}
	}
	if len(next) != len(want) {
		return fmt.Sprintf("stored drones %v, want %v", next, want)
	}
	return ""
}

// runIngester starts an ingester in the background; stop it with the
// returned function (which returns Run's error).
func runIngester(t testing.TB, cfg Config, s *localstream.Store, st Appender, marks Marks) (*Ingester, func() error) {
	t.Helper()
	in, err := New(cfg, Sink{Stream: st, Meta: s, Marks: marks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- in.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-errc })
		return runErr
	}
	t.Cleanup(func() { stop() })
	return in, stop
}

func testConfig(brokerURL, client string) Config {
	cfg := NewDefaultConfig()
	cfg.Broker = brokerURL
	cfg.ClientID = client
	cfg.MaxReconnectInterval = 500 * time.Millisecond
	cfg.KeepAlive = 2 * time.Second
	return cfg
}

// subscribeOnce creates the persistent session of client with its
// subscriptions, so that messages published before the agent first runs
// are queued for it.
func subscribeOnce(t testing.TB, url, client string, filters ...string) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(client).SetCleanSession(false))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	f := map[string]byte{}
	for _, x := range filters {
		f[x] = 1
	}
	if tok := c.SubscribeMultiple(f, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c.Disconnect(50)
}

// publisher returns a connected plain client for hand-made messages.
func publisher(t testing.TB, url string) paho.Client {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("pub-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}
