package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestRedeliveryToNewStoreIsMarked: messages stored whose PUBACKs never
// reach the broker, then the store lost (a new data directory, as after
// the old one was removed): the broker delivers them again with DUP, no
// dedup entry knows them, and the new store holds them a second time.
// That cannot be told from the agent alone, so each such copy carries
// HeaderRedelivered with its dedup identity (RedeliveryID of the copy it
// repeats) and is counted (Stats.Redelivered): only messages never
// acknowledged repeat, each marked, nothing is lost.
//
// Failed before the mark: "seq … of drone … repeated without the header".
func TestRedeliveryToNewStoreIsMarked(t *testing.T) {
	b := startBroker(t)
	px := testkit.NewProxy(t, b.Addr(), testkit.ProxyHooks{})
	cfg := testConfig("tcp://"+px.Addr(), "agent-lost-dir")
	cfg.KeepAlive = 30 * time.Second // the dropped PINGREQs must not end the session first

	s1, st1 := openStore(t, t.TempDir())
	in1, stop1 := runIngester(t, cfg, s1, st1, nil)
	testkit.WaitFor(t, 10*time.Second, "connect", func() bool { return in1.Stats().Connects > 0 })
	const drones, n = 2, 400
	simDone := make(chan error, 1)
	go func() {
		_, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, Rate: 200, Window: 4, NoStatus: true})
		simDone <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "flowing", func() bool { return in1.Stats().Appended > 100 })
	px.DropUp(true) // the agent's PUBACKs vanish from here on
	atDrop := in1.Stats().Appended
	testkit.WaitFor(t, 10*time.Second, "stored and not acknowledged", func() bool { return in1.Stats().Appended >= atDrop+50 })
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	first := readAll(t, st1)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if px.Dropped() == 0 {
		t.Fatal("no PUBACK was dropped: the fault did not happen")
	}

	// The old directory is gone: a new, empty store, the same session.
	px.DropUp(false)
	s2, st2 := openStore(t, t.TempDir())
	defer s2.Close()
	in2, stop2 := runIngester(t, cfg, s2, st2, nil)
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	have := func(recs []localstream.Record) map[string]localstream.Record {
		m := map[string]localstream.Record{}
		for _, r := range recs {
			var msg mqttsim.Telemetry
			if err := json.Unmarshal(r.Payload, &msg); err != nil {
				t.Fatalf("record %s: %v", r.Position, err)
			}
			m[fmt.Sprintf("%s/%d", msg.Drone, msg.Seq)] = r
		}
		return m
	}
	testkit.WaitFor(t, 30*time.Second, "every message stored", func() bool {
		got, old := have(readAll(t, st2)), have(first)
		for d := 1; d <= drones; d++ {
			for seq := 1; seq <= n; seq++ {
				k := fmt.Sprintf("drone-%d/%d", d, seq)
				if _, ok := got[k]; !ok {
					if _, ok := old[k]; !ok {
						return false
					}
				}
			}
		}
		return true
	})
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	second := readAll(t, st2)
	old := have(first)
	repeats, marked := 0, 0
	for _, r := range second {
		var msg mqttsim.Telemetry
		if err := json.Unmarshal(r.Payload, &msg); err != nil {
			t.Fatal(err)
		}
		id, isMarked := r.Event.Header(HeaderRedelivered)
		if isMarked {
			marked++
			topic, _ := r.Event.Header(HeaderTopic)
			if want := RedeliveryID(topic, r.Payload); id != want {
				t.Fatalf("seq %d of drone %s marked %q, want its identity %q", msg.Seq, msg.Drone, id, want)
			}
		}
		o, ok := old[fmt.Sprintf("%s/%d", msg.Drone, msg.Seq)]
		if !ok {
			continue
		}
		repeats++
		if !isMarked {
			t.Fatalf("seq %d of drone %s repeated without the header %s", msg.Seq, msg.Drone, HeaderRedelivered)
		}
		topic, _ := o.Event.Header(HeaderTopic)
		if RedeliveryID(topic, o.Payload) != id {
			t.Fatalf("seq %d of drone %s: the mark %q does not name the copy it repeats", msg.Seq, msg.Drone, id)
		}
	}
	if repeats == 0 {
		t.Fatal("no message stored twice: the fault did not happen")
	}
	if got := in2.Stats().Redelivered; got != uint64(marked) {
		t.Fatalf("Stats.Redelivered %d, %d events marked", got, marked)
	}
	t.Logf("%d stored before the loss (%d after the PUBACKs were dropped), %d of them again, each marked; %d marked in all",
		len(first), uint64(len(first))-atDrop, repeats, marked)
}
