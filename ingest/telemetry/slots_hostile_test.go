package telemetry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// fillSlots publishes, from pub, one QoS 0 message to each of n new drone
// ids ("hostile-0" …) and returns at once (QoS 0: nothing to wait for).
func fillSlots(t testing.TB, pub paho.Client, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		tok := pub.Publish(fmt.Sprintf("drones/hostile-%d/telemetry", i), 0, false, `{"spam":true}`)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
}

// TestFullSlotsDoNotStallKnownDrones (issue 30.1): one client publishes
// to more new drone ids than there are slots, through a real Mosquitto;
// a drone that already holds a slot keeps being stored at once. On main
// the next new id waited for a slot in waitForLane with deliverMu held —
// every delivery, the good drone's too, waited (the broker keep-alive
// broke). Through a broker a refused message is acknowledged and counted
// (DronesOverLimit, /healthz): holding it would take one of the broker's
// in-flight slots for good and stall the session, and the reconnect
// would deliver it again (see docs/telemetry.md).
func TestFullSlotsDoNotStallKnownDrones(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-full-slots")
	cfg.MaxDrones = 16
	cfg.DroneIdleTimeout = time.Hour
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	good := publisher(t, b.URL())
	send := func(seq int) {
		tok := good.Publish("drones/good/telemetry", 1, false, fmt.Sprintf(`{"drone":"good","seq":%d}`, seq))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	send(1)
	testkit.WaitFor(t, 10*time.Second, "the good drone's first message stored", func() bool { return in.Stats().Appended == 1 })
	hostile := publisher(t, b.URL())
	fillSlots(t, hostile, cfg.MaxDrones+50)
	testkit.WaitFor(t, 10*time.Second, "a new id refused", func() bool { return in.Stats().DronesOverLimit > 0 })
	if p := in.Problems(time.Now()); !strings.Contains(strings.Join(p, "; "), "max_drones") {
		t.Fatalf("problems %q do not name the refusal", p)
	}
	for seq := 2; seq <= 20; seq++ {
		send(seq)
	}
	testkit.WaitFor(t, 10*time.Second, "the good drone stored while new ids are refused", func() bool {
		n := 0
		for _, r := range readAll(t, st) {
			if r.RoutingKey == "good" {
				n++
			}
		}
		return n == 20
	})
	testkit.WaitFor(t, 10*time.Second, "every hostile message handled", func() bool {
		g := in.Stats()
		return g.Appended+g.DronesOverLimit == 20+uint64(cfg.MaxDrones+50)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := in.Stats(); got.DronesOverLimit != 51 {
		t.Fatalf("refused %d, want 51 (one slot is the good drone's)", got.DronesOverLimit)
	}
}

// TestListenerRefusedDroneNoPubAck (issue 30.1): on the listener a new
// drone refused by a full table gets no PUBACK — its publisher keeps the
// message and sends it again after a reconnect — while the connection's
// later messages of known drones are acked and a drone on another
// connection is stored at once.
func TestListenerRefusedDroneNoPubAck(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := listenConfig()
	cfg.MaxDrones = 2
	cfg.DroneIdleTimeout = time.Hour
	in, stop := startListener(t, cfg, s, st, nil)
	addr := in.ListenAddr().String()
	good := newListenPub(t, addr, "good", false, "good")
	if err := good.publish(1, 1, nil); err != nil {
		t.Fatal(err)
	}
	hostile := newListenPub(t, addr, "hostile", false)
	pub := func(drone string, seq int) paho.Token {
		return hostile.c.Publish("drones/"+drone+"/telemetry", 1, false, fmt.Sprintf(`{"drone":%q,"seq":%d}`, drone, seq))
	}
	if tok := pub("known", 1); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("known: %v", tok.Error())
	}
	refused := pub("refused", 1)
	later := pub("known", 2)
	if !later.WaitTimeout(10*time.Second) || later.Error() != nil {
		t.Fatalf("a known drone's message after the refused one was not acked: %v", later.Error())
	}
	if refused.WaitTimeout(300 * time.Millisecond) {
		t.Fatalf("the refused drone's message was acknowledged (err %v)", refused.Error())
	}
	if err := good.publish(2, 20, nil); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	if got.DronesOverLimit != 1 || got.Appended != 22 {
		t.Fatalf("refused %d appended %d, want 1 and 22", got.DronesOverLimit, got.Appended)
	}
	if msg := verifyExactlyOnce(readAll(t, st), map[string]uint64{"good": 20, "known": 2}); msg != "" {
		t.Fatal(msg)
	}
}

// TestRetainedStatusTakesNoSlot (issue 30.1): more retained status
// messages at the broker than there are slots (a real fleet's, no
// attacker needed) take no slot and do not stall the subscription: a
// drone's telemetry is stored at once. On main the status match ran
// before the retained check and took a slot per status; the next waited
// with delivery held, the subscribe timed out and the reconnect delivered
// them all again.
func TestRetainedStatusTakesNoSlot(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-retained-status")
	cfg.MaxDrones = 8
	cfg.DroneIdleTimeout = time.Hour
	cfg.ConnectTimeout = 3 * time.Second
	pub := publisher(t, b.URL())
	for i := 0; i < 3*cfg.MaxDrones; i++ {
		status := "online"
		if i%2 == 1 {
			status = "offline"
		}
		tok := pub.Publish(fmt.Sprintf("drones/fleet-%d/status", i), 1, true, status)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "subscribed", func() bool { return isClosed(in.Subscribed()) })
	testkit.WaitFor(t, 10*time.Second, "the retained status skipped", func() bool { return in.Stats().RetainedSkipped >= uint64(3*cfg.MaxDrones) })
	for seq := 1; seq <= 5; seq++ {
		tok := pub.Publish("drones/live/telemetry", 1, false, fmt.Sprintf(`{"drone":"live","seq":%d}`, seq))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the live drone stored", func() bool { return in.Stats().Appended == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	if got.DronesOverLimit != 0 || got.Connects != 1 || got.SubscribeErrors != 0 {
		t.Fatalf("refused %d connects %d subscribe errors %d: the retained status took slots", got.DronesOverLimit, got.Connects, got.SubscribeErrors)
	}
}
