package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// TestDroneSlotsGivenBack: max_drones drones fill the slots and fall
// silent; after drone_idle_timeout a new drone's messages are stored (on
// main they were dropped and acknowledged: lost).
func TestDroneSlotsGivenBack(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-slots")
	cfg.MaxDrones = 4
	cfg.DroneIdleTimeout = 300 * time.Millisecond
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	pub := publisher(t, b.URL())
	send := func(drone string, seq int) {
		tok := pub.Publish("drones/"+drone+"/telemetry", 1, false, fmt.Sprintf(`{"drone":%q,"seq":%d}`, drone, seq))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	for i := 1; i <= 4; i++ {
		send(fmt.Sprintf("old-%d", i), 1)
	}
	testkit.WaitFor(t, 10*time.Second, "the first drones stored", func() bool { return in.Stats().Appended == 4 })
	time.Sleep(2 * cfg.DroneIdleTimeout) // the drones' silence is the test: the listener times it on real sockets
	for seq := 1; seq <= 3; seq++ {
		send("new-1", seq)
	}
	testkit.WaitFor(t, 10*time.Second, "the new drone stored", func() bool { return in.Stats().Appended == 7 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	if got.DronesReleased == 0 || got.DronesOverLimit != 0 {
		t.Fatalf("released %d over limit %d", got.DronesReleased, got.DronesOverLimit)
	}
	n := 0
	for _, r := range readAll(t, st) {
		if r.RoutingKey == "new-1" {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d events of the new drone stored, want 3", n)
	}
}

// TestRefusedDroneAckedFromBroker: while every slot is held by an active
// drone, a new drone's message from the broker is refused — counted,
// logged, reported by Problems — and acknowledged, at once: held unacked
// it would take one of the broker's in-flight slots for the session until
// a reconnect, which would only deliver it again (a loop). So the next run
// does not get it again. (On the listener a refused message gets no
// PUBACK: TestListenerRefusedDroneNoPubAck.)
func TestRefusedDroneAckedFromBroker(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	logs := &testkit.SyncBuffer{}
	cfg := testConfig(b.URL(), "agent-refused")
	cfg.MaxDrones = 2
	cfg.DroneIdleTimeout = time.Hour
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	pub := publisher(t, b.URL())
	send := func(drone string) {
		tok := pub.Publish("drones/"+drone+"/telemetry", 1, false, fmt.Sprintf(`{"drone":%q,"seq":1}`, drone))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	send("a")
	send("b")
	testkit.WaitFor(t, 10*time.Second, "a and b stored", func() bool { return in.Stats().Appended == 2 })
	send("c")
	testkit.WaitFor(t, 10*time.Second, "c refused", func() bool { return in.Stats().DronesOverLimit > 0 })
	if len(in.Problems(time.Now())) == 0 {
		t.Fatal("no problem reported while new drones are refused")
	}
	testkit.WaitFor(t, 10*time.Second, "the refusal logged", func() bool { return strings.Contains(logs.String(), "drones_refused=1") })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if in.Stats().Appended != 2 {
		t.Fatalf("appended %d while full", in.Stats().Appended)
	}
	// Acknowledged: the broker does not deliver it again.
	cfg.Logger = nil
	in2, stop2 := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in2.Subscribed()) })
	send("d")
	testkit.WaitFor(t, 10*time.Second, "d stored", func() bool { return in2.Stats().Appended == 1 })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if msg := verifyExactlyOnce(readAll(t, st), map[string]uint64{"a": 1, "b": 1, "d": 1}); msg != "" {
		t.Fatal(msg)
	}
}

// TestLongDroneID: a 300-byte and a 5,000-byte topic level are mapped to a bounded id — deterministically, counted — so
// that its events are stored in order with working watermark marks: no
// MarkErrors, no late flags. The original topic stays in the event.
func TestLongDroneID(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	tr, err := watermark.NewTracker(st, s, watermark.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(b.URL(), "agent-longid")
	in, stop := runIngester(t, cfg, s, st, tr)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	pub := publisher(t, b.URL())
	long := strings.Repeat("é", 150) // 300 bytes
	// (Mosquitto drops a client that publishes control characters in a
	// topic; TestDroneID covers those.)
	ids := []string{long, strings.Repeat("x", 5000), "d1"}
	base := time.Now().UnixMilli()
	for seq := 1; seq <= 3; seq++ {
		for _, id := range ids {
			tok := pub.Publish("drones/"+id+"/telemetry", 1, false,
				fmt.Sprintf(`{"drone":%q,"seq":%d,"timestamp":%d}`, id, seq, base+int64(seq)))
			if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
		}
	}
	testkit.WaitFor(t, 10*time.Second, "all stored", func() bool { return in.Stats().Appended == 9 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	if got.MarkErrors != 0 || got.Late != 0 || got.DroneIDsMapped != 6 {
		t.Fatalf("mark errors %d late %d mapped %d", got.MarkErrors, got.Late, got.DroneIDsMapped)
	}
	seqs := map[string]int{}
	for _, r := range readAll(t, st) {
		if len(r.RoutingKey) > MaxDroneIDBytes || r.Flags.Has(localstream.FlagLate) {
			t.Fatalf("routing key of %d bytes, flags %v", len(r.RoutingKey), r.Flags)
		}
		topic, _ := r.Header(HeaderTopic)
		id := strings.TrimSuffix(strings.TrimPrefix(topic, "drones/"), "/telemetry")
		if want, _ := DroneID(id); r.RoutingKey != want {
			t.Fatalf("topic %q stored under %q, want %q", topic, r.RoutingKey, want)
		}
		seqs[r.RoutingKey]++
	}
	if len(seqs) != 3 {
		t.Fatalf("drones %v", seqs)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestOfflineDroneGivesSlotBack: a drone that announces "offline" gives its
// slot back at once, however short its silence.
func TestOfflineDroneGivesSlotBack(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-offline-slot")
	cfg.MaxDrones = 1
	cfg.DroneIdleTimeout = time.Hour
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	pub := publisher(t, b.URL())
	send := func(topic, payload string) {
		tok := pub.Publish(topic, 1, false, payload)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	send("drones/a/telemetry", `{"drone":"a","seq":1}`)
	send("drones/a/status", "offline")
	testkit.WaitFor(t, 10*time.Second, "a stored and closed", func() bool {
		return in.Stats().Appended == 1 && in.Stats().WritersClosed == 1
	})
	send("drones/b/telemetry", `{"drone":"b","seq":1}`)
	testkit.WaitFor(t, 10*time.Second, "b stored", func() bool { return in.Stats().Appended == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := in.Stats(); got.DronesReleased != 1 {
		t.Fatalf("released %d, want 1", got.DronesReleased)
	}
}

// TestRefusedDroneWrittenAsGapMarker (issue 30.1, rule 2 of docs/design.md):
// a message from the broker that a full drone table refuses is acked and
// dropped — a loss by policy — and the loss is written into the telemetry
// stream as gap markers (FlagGap, writer RefusedWriter), coalesced and
// bounded: the refused drones' own markers (routing key the drone id) for
// at most maxRefusedKeys ids per marker, the rest in one summary marker
// (routing key RefusedKey). Every refused message is in exactly one marker;
// the markers are durable before the refused messages are acked.
func TestRefusedDroneWrittenAsGapMarker(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-refused-gap")
	cfg.MaxDrones = 2
	cfg.DroneIdleTimeout = time.Hour
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	pub := publisher(t, b.URL())
	send := func(drone string, seq int) {
		tok := pub.Publish("drones/"+drone+"/telemetry", 1, false, fmt.Sprintf(`{"drone":%q,"seq":%d}`, drone, seq))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	send("a", 1)
	send("b", 1)
	testkit.WaitFor(t, 10*time.Second, "a and b stored", func() bool { return in.Stats().Appended == 2 })
	for seq := 1; seq <= 3; seq++ {
		send("c", seq)
	}
	const spam = 3 * maxRefusedKeys // more ids than one marker round names
	for i := range spam {
		send(fmt.Sprintf("new-%d", i), 1)
	}
	send("a", 2)
	testkit.WaitFor(t, 10*time.Second, "a's second message stored", func() bool { return in.Stats().Appended == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := in.Stats().DronesOverLimit; got != 3+spam {
		t.Fatalf("refused %d, want %d", got, 3+spam)
	}
	var markers, events, drones uint64
	perDrone := map[string]uint64{}
	var telemetry []localstream.Record
	for _, r := range readAll(t, st) {
		if !r.Flags.Has(localstream.FlagGap) {
			telemetry = append(telemetry, r)
			continue
		}
		markers++
		if r.Writer != RefusedWriter || r.ContentType != ContentTypeJSON {
			t.Fatalf("marker %s: writer %q content type %q", r.Position, r.Writer, r.ContentType)
		}
		var g RefusedGap
		if err := json.Unmarshal(r.Payload, &g); err != nil {
			t.Fatalf("marker %s: %v: %s", r.Position, err, r.Payload)
		}
		if g.Reason != RefusedReason || g.Events == 0 || g.Bytes == 0 || g.MaxDrones != cfg.MaxDrones || g.FirstReceiveNs > g.LastReceiveNs {
			t.Fatalf("marker %s: %s", r.Position, r.Payload)
		}
		events += g.Events
		if r.RoutingKey == RefusedKey {
			drones += g.Drones
			continue
		}
		if g.Drones != 1 {
			t.Fatalf("marker %s of drone %s: %s", r.Position, r.RoutingKey, r.Payload)
		}
		drones++
		perDrone[r.RoutingKey] += g.Events
	}
	if events != 3+spam || drones < 1+spam {
		t.Fatalf("%d markers for %d events of %d drones, want %d events of at least %d drones (a drone may be in two rounds)", markers, events, drones, 3+spam, 1+spam)
	}
	if perDrone["c"] != 3 && perDrone["c"] != 0 {
		t.Fatalf("c's markers count %d events, want 3 (or c in a summary)", perDrone["c"])
	}
	if len(perDrone) == 0 || markers > 3+spam {
		t.Fatalf("%d markers, %d drones with their own: want coalesced markers naming drones", markers, len(perDrone))
	}
	if got := in.Stats().RefusedMarkers; got != markers {
		t.Fatalf("stats count %d markers, the stream holds %d", got, markers)
	}
	if msg := verifyExactlyOnce(telemetry, map[string]uint64{"a": 2, "b": 1}); msg != "" {
		t.Fatal(msg)
	}
}

// TestRefusedQoS0HoldsNoAck: a QoS 0 message refused from the broker has
// no PUBACK to wait for its gap marker, so it must not hold back the
// PUBACKs of the messages after it (ackOrder) until the next marker round.
// Held, it did: with Mosquitto's in-flight window (1 here) full of
// messages whose PUBACKs waited behind it, the broker delivered nothing
// more until the round; in TestHostileNeighbours' new-drone-ids phase (QoS
// 0 spam through the broker) the good drones' ingest delay p99 rose from
// ~0.4 s to 2–4 s at load 30.
func TestRefusedQoS0HoldsNoAck(t *testing.T) {
	defer func(d time.Duration) { refusedEvery = d }(refusedEvery)
	refusedEvery = time.Minute // the round after the first: far away
	b, err := broker.Start(context.Background(), broker.Options{Dir: t.TempDir(), MaxInflight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-refused-qos0")
	cfg.MaxDrones = 1
	cfg.DroneIdleTimeout = time.Hour
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	pub := publisher(t, b.URL())
	send := func(drone string, qos byte, seq int) {
		tok := pub.Publish("drones/"+drone+"/telemetry", qos, false, fmt.Sprintf(`{"drone":%q,"seq":%d}`, drone, seq))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s %d: %v", drone, seq, tok.Error())
		}
	}
	send("a", 1, 1)
	testkit.WaitFor(t, 10*time.Second, "a stored", func() bool { return in.Stats().Appended == 1 })
	send("b", 0, 1) // refused: the first round, at once
	testkit.WaitFor(t, 10*time.Second, "b's marker", func() bool { return in.Stats().RefusedMarkers == 1 })
	send("c", 0, 1) // refused: its marker waits for the next round, a minute away
	testkit.WaitFor(t, 10*time.Second, "c refused", func() bool { return in.Stats().DronesOverLimit == 2 })
	for seq := 2; seq <= 4; seq++ { // one at a time through the window of 1
		send("a", 1, seq)
	}
	testkit.WaitFor(t, 10*time.Second, "a's messages after c stored", func() bool { return in.Stats().Appended == 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := in.Stats().RefusedMarkers; got != 2 {
		t.Fatalf("markers %d, want 2 (c's at the stop)", got)
	}
}
