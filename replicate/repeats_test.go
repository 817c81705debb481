package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// mqttMsg is a telemetry message as the MQTT intake stores it.
type mqttMsg struct {
	Drone string `json:"drone"`
	Seq   int    `json:"seq"`
}

// appendMQTT appends m as the MQTT intake does (topic header; marked as
// a redelivery when marked) and notes its writer mark.
func appendMQTT(t testing.TB, st *localstream.Stream, m mqttMsg, marked bool) {
	t.Helper()
	topic := "drones/" + m.Drone + "/telemetry"
	payload, _ := json.Marshal(m)
	hs := []localstream.Header{{Key: telemetry.HeaderTopic, Value: topic}}
	if marked {
		hs = append(hs, localstream.Header{Key: telemetry.HeaderRedelivered, Value: telemetry.RedeliveryID(topic, payload)})
	}
	now := time.Now().UnixNano()
	ev := localstream.Event{RoutingKey: m.Drone, Writer: telemetry.WriterFor(m.Drone), EventTime: now, IngestTime: now,
		ContentType: telemetry.ContentTypeJSON, Headers: hs, Payload: payload}
	pos, err := st.Append(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := trackerFor(st).Note(ev.Writer, ev.EventTime, pos); err != nil {
		t.Fatal(err)
	}
}

// TestRepeatsOfALostStoreNotSentAgain (issue 29): a store sends telemetry
// and is lost with its dedup records (its directory removed) while its
// last messages were unacknowledged; a new store of the same station
// holds their redeliveries, marked. Its replicator takes the chain over,
// reads the centre's tail first and sends none of the marked
// redeliveries whose first copy is there — those the lost store had
// stored and not sent go, and so does a marked first copy whose content
// equals an older event, after the drone's fresh messages — across a
// restart of the replicator on a reopened store (replayed from the seed,
// not from memory). Every message at the centre exactly once, in both
// layouts.
//
// On main (2a25df7) the centre held each redelivery twice.
func TestRepeatsOfALostStoreNotSentAgain(t *testing.T) {
	for _, layout := range []int{2, 1} {
		t.Run(fmt.Sprintf("layout%d", layout), func(t *testing.T) {
			testRepeatsNotSentAgain(t, layout)
		})
	}
}

func testRepeatsNotSentAgain(t *testing.T, layout int) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	agent := fmt.Sprintf("agent-repeats-%d", layout)
	js := JetStreamOptions{Layout: layout}
	cfg := ReplicatorConfig{CommitInterval: 20 * time.Millisecond, Station: testStation, Repeat: telemetry.Repeat,
		Logger: slog.New(slog.DiscardHandler)}
	drones := []string{"d0", "d1", "d2", "d3"}
	const sent, unsent, redelivered, fresh = 10, 3, 5, 4
	want := map[string]int{} // payload → copies at the centre

	// The lost store: sent messages, then some stored and never sent.
	s1, st1 := openStore(t, t.TempDir())
	for seq := range sent {
		for _, d := range drones {
			appendMQTT(t, st1, mqttMsg{d, seq}, false)
		}
	}
	rp := startReplica(t, nc, st1, agent, cfg, js)
	waitCaughtUp(t, nc, st1, agent, 30*time.Second)
	rp.close()
	for seq := sent; seq < sent+unsent; seq++ {
		for _, d := range drones {
			appendMQTT(t, st1, mqttMsg{d, seq}, false)
		}
	}
	s1.Close() // its directory is gone with its dedup records

	// The new store: the broker redelivers each drone's unacknowledged
	// window first (the last sent ones and the unsent ones), then fresh
	// messages; then a marked first copy equal to an old message.
	dir2 := t.TempDir()
	s2, st2 := openStore(t, dir2)
	for seq := sent - redelivered; seq < sent+unsent; seq++ {
		for _, d := range drones {
			appendMQTT(t, st2, mqttMsg{d, seq}, true)
		}
	}
	for seq := sent + unsent; seq < sent+unsent+fresh; seq++ {
		for _, d := range drones {
			appendMQTT(t, st2, mqttMsg{d, seq}, false)
		}
	}
	for _, d := range drones {
		for seq := range sent + unsent + fresh {
			b, _ := json.Marshal(mqttMsg{d, seq})
			want[string(b)]++
		}
		b, _ := json.Marshal(mqttMsg{d, 0})
		want[string(b)]++ // the marked first copy of equal content, below
	}

	// One transaction of three events at a time. The first run stops
	// after two commits, the second when all is sent; the store is
	// reopened between runs, so each finds the set's state by replaying
	// the store's events from the seed. Then a marked first copy whose
	// content equals an old message of the centre's tail: sent, since its
	// drone's fresh messages ended the drone's redeliveries.
	small := cfg
	small.MaxTxnEvents = 3
	var runs []StreamStats
	var last *Replicator
	run := func(what string, until func(StreamStats) bool, before func(st *localstream.Stream), stopAfter int) {
		s2.Close()
		s2, st2 = openStore(t, dir2)
		if before != nil {
			before(st2)
		}
		c := small
		var stop atomic.Pointer[context.CancelFunc]
		if stopAfter > 0 {
			// Stopped from its own commits: a transaction is built
			// while the one before waits for its ack.
			var n atomic.Int32
			c.OnCommit = func(Committed, []int64) {
				if int(n.Add(1)) == stopAfter {
					(*stop.Load())()
				}
			}
		}
		rp := startReplica(t, nc, st2, agent, c, js)
		stop.Store(&rp.stop)
		testkit.WaitFor(t, 30*time.Second, what, func() bool { return until(rp.r.Stats()) })
		rp.close()
		runs, last = append(runs, rp.r.Stats()), rp.r
	}
	caughtUp := func(s StreamStats) bool { return s.Txns > 0 && s.BacklogEvents == 0 }
	run("three commits of the new store", func(s StreamStats) bool { return s.Txns >= 3 }, nil, 3)
	// The state a new process finds by replay is the one the run had at
	// its last commit.
	if last.repeatsCommitted == nil {
		t.Fatalf("no repeats state at the first run's last commit: live %+v, stats %+v", last.repeats, runs[0])
	}
	mem, at := *last.repeatsCommitted, last.repeatsCommittedAt
	s2.Close()
	s2, st2 = openStore(t, dir2)
	fresh2 := NewReplicator(st2, newSink(t, nc, agent), newInstance(), cfg)
	if err := fresh2.load(); err != nil {
		t.Fatal(err)
	}
	if err := fresh2.loadRepeats(at, last.repeatsCommittedBase); err != nil {
		t.Fatal(err)
	}
	if fresh2.repeats == nil || fresh2.repeats.Left != mem.Left || !reflect.DeepEqual(fresh2.repeats.Keys, mem.Keys) {
		t.Fatalf("replayed repeats state at %s: %+v, want the run's %+v", at, fresh2.repeats, mem)
	}
	t.Logf("the replayed state at the first run's last commit %s is the run's: %d keys, %d events left", at, len(mem.Keys), mem.Left)
	run("the new store's events at the centre", caughtUp, nil, 0)
	run("the marked first copies at the centre", caughtUp, func(st *localstream.Stream) {
		for _, d := range drones {
			appendMQTT(t, st, mqttMsg{d, 0}, true)
		}
	}, 0)
	defer s2.Close()
	var dropped uint64
	for _, r := range runs {
		dropped += r.RepeatsDropped
	}
	t.Logf("layout %d: read back %d identities; %d marked redeliveries, %d not sent again (by run: %d, %d, %d)",
		layout, runs[0].RepeatsKnown, len(drones)*(redelivered+unsent+1), dropped, runs[0].RepeatsDropped, runs[1].RepeatsDropped, runs[2].RepeatsDropped)
	if runs[0].RepeatsKnown != uint64(len(drones)*sent) {
		t.Errorf("read back %d identities, want the %d the centre had", runs[0].RepeatsKnown, len(drones)*sent)
	}
	if want := uint64(len(drones) * redelivered); dropped != want {
		t.Errorf("%d repeats not sent, want %d", dropped, want)
	}

	items, err := centralread.ReadAll(context.Background(), nc, testStream, centralread.ReadOptions{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var lost []*wire.LostRange
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemEvent:
			got[string(it.Event.Record.Payload)]++
		case centralread.ItemCommit:
			if it.Commit.Lost != nil {
				lost = append(lost, it.Commit.Lost)
			}
		}
	}
	for p, n := range want {
		if got[p] != n {
			t.Errorf("%s: %d copies at the centre, want %d", p, got[p], n)
		}
	}
	for p, n := range got {
		if want[p] == 0 {
			t.Errorf("%s: %d copies at the centre, never published", p, n)
		}
	}
	if len(lost) != 1 || lost[0].Reason != wire.LossStoreReplaced {
		t.Errorf("gap markers %v: want the one store-replaced of the lost store", lost)
	}
}
