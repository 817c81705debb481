package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// dialRaw opens a plain TCP connection to the listener.
func dialRaw(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConnect sends a CONNECT and returns the CONNACK's code.
func rawConnect(t testing.TB, c net.Conn, client string, clean bool, keepAlive uint16, will *[2]string) byte {
	t.Helper()
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 4
	cp.ClientIdentifier, cp.CleanSession, cp.Keepalive = client, clean, keepAlive
	if will != nil {
		cp.WillFlag, cp.WillTopic, cp.WillMessage, cp.WillQos = true, will[0], []byte(will[1]), 1
	}
	if err := cp.Write(c); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	ack, err := packets.ReadPacket(c)
	if err != nil {
		t.Fatalf("connack: %v", err)
	}
	return ack.(*packets.ConnackPacket).ReturnCode
}

// closedByServer waits until the server closes c (not a timeout of ours).
func closedByServer(t testing.TB, c net.Conn, within time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", within)
	}
}

// TestListenerHostileClients: garbage, a huge remaining length, a CONNECT
// that never comes, too many connections, an oversized payload, SUBSCRIBE,
// a silent client, QoS 2 — each ends in its documented, counted outcome,
// without a large allocation, while a good publisher stores everything.
func TestListenerHostileClients(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := listenConfig()
	cfg.ConnectTimeout = 300 * time.Millisecond
	cfg.MaxConnections = 8
	cfg.MaxPayload = 1024
	in, stop := startListener(t, cfg, s, st, nil)
	addr := in.ListenAddr().String()

	// The good publisher runs throughout.
	good := newListenPub(t, addr, "good", false, "good")
	goodDone := make(chan error, 1)
	go func() { goodDone <- good.publish(1, 200, nil) }()

	t.Run("garbage", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(testkit.Seed(t), 1))
		for range 5 {
			c := dialRaw(t, addr)
			junk := make([]byte, 64+rng.IntN(512))
			for i := range junk {
				junk[i] = byte(rng.IntN(256))
			}
			junk[0] = 0xf0 // type 15: never valid
			c.Write(junk)
			closedByServer(t, c, 5*time.Second)
		}
		// Type 15 is malformed, unless the random length bytes after it
		// are already over the bound: refused as too large first.
		testkit.WaitFor(t, 5*time.Second, "protocol errors counted", func() bool {
			st := in.Stats()
			return st.ListenerProtocolErrors+st.ListenerTooLarge == 5
		})
	})
	t.Run("huge remaining length", func(t *testing.T) {
		large0 := in.Stats().ListenerTooLarge
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := dialRaw(t, addr)
		if rawConnect(t, c, "huge", true, 0, nil) != packets.Accepted {
			t.Fatal("refused")
		}
		c.Write([]byte{0x32, 0xff, 0xff, 0xff, 0x7f}) // PUBLISH QoS 1, 256 MB follow
		closedByServer(t, c, 5*time.Second)
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Fatalf("allocated %d bytes for a refused packet", grew)
		}
		c2 := dialRaw(t, addr) // before CONNECT too
		c2.Write([]byte{0x10, 0xff, 0xff, 0xff, 0x7f})
		closedByServer(t, c2, 5*time.Second)
		testkit.WaitFor(t, 5*time.Second, "too large counted", func() bool { return in.Stats().ListenerTooLarge == large0+2 })
	})
	t.Run("no connect", func(t *testing.T) {
		c := dialRaw(t, addr)
		closedByServer(t, c, 10*time.Second)
		testkit.WaitFor(t, 5*time.Second, "connect timeout counted", func() bool { return in.Stats().ListenerConnectTimeouts == 1 })
	})
	t.Run("bad connects", func(t *testing.T) {
		c := dialRaw(t, addr)
		if rc := rawConnect(t, c, strings.Repeat("x", 300), true, 0, nil); rc != packets.ErrRefusedIDRejected {
			t.Fatalf("long client id: code %d", rc)
		}
		closedByServer(t, c, 5*time.Second)
		c = dialRaw(t, addr)
		if rc := rawConnect(t, c, "", false, 0, nil); rc != packets.ErrRefusedIDRejected {
			t.Fatalf("empty id, persistent: code %d", rc)
		}
		closedByServer(t, c, 5*time.Second)
		testkit.WaitFor(t, 5*time.Second, "refused connects counted", func() bool { return in.Stats().ListenerConnectRefused == 2 })
	})
	t.Run("too many connections", func(t *testing.T) {
		var held []net.Conn
		for range 12 {
			held = append(held, dialRaw(t, addr))
		}
		testkit.WaitFor(t, 5*time.Second, "refused counted", func() bool { return in.Stats().ListenerRefused >= 5 })
		for _, c := range held {
			c.Close()
		}
		testkit.WaitFor(t, 5*time.Second, "slots back", func() bool { return in.Stats().ListenerConnections == 1 })
	})
	t.Run("oversize subscribe qos0 qos2", func(t *testing.T) {
		p := newListenPub(t, addr, "odd", true)
		tok := p.c.Publish("drones/big/telemetry", 1, false, bytes.Repeat([]byte("x"), 2000))
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("oversize not acked: %v", tok.Error())
		}
		sub := p.c.Subscribe("drones/#", 1, nil)
		if !sub.WaitTimeout(10 * time.Second) {
			t.Fatal("no suback")
		}
		if code := sub.(*paho.SubscribeToken).Result()["drones/#"]; code != 0x80 {
			t.Fatalf("suback code %#x", code)
		}
		for q := byte(0); q <= 2; q++ {
			tok := p.c.Publish("drones/q/telemetry", q, false, fmt.Sprintf(`{"drone":"q","seq":%d}`, q+1))
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("qos %d: %v", q, tok.Error())
			}
		}
		testkit.WaitFor(t, 5*time.Second, "counted", func() bool {
			st := in.Stats()
			return st.Oversize == 1 && st.ListenerSubscribeRefused == 1 && st.ListenerQoS2 == 1
		})
	})
	t.Run("keep-alive 0", func(t *testing.T) {
		// No keep-alive: no deadline, past the CONNECT's either.
		c := dialRaw(t, addr)
		if rawConnect(t, c, "no-keepalive", true, 0, nil) != packets.Accepted {
			t.Fatal("refused")
		}
		time.Sleep(3 * cfg.ConnectTimeout) // a deadline that must not fire elapses in the real listener: no event to wait on
		if err := packets.NewControlPacket(packets.Pingreq).Write(c); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		p, err := packets.ReadPacket(c)
		if err != nil {
			t.Fatalf("closed: %v", err)
		}
		if _, ok := p.(*packets.PingrespPacket); !ok {
			t.Fatalf("got %v", p)
		}
	})
	t.Run("silent client", func(t *testing.T) {
		c := dialRaw(t, addr)
		if rawConnect(t, c, "silent", true, 1, nil) != packets.Accepted {
			t.Fatal("refused")
		}
		closedByServer(t, c, 10*time.Second) // 1.5 × 1 s
		testkit.WaitFor(t, 5*time.Second, "keep-alive counted", func() bool { return in.Stats().ListenerKeepAliveTimeouts == 1 })
	})
	if err := <-goodDone; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "stored", func() bool { return in.Stats().Appended == 200+3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	q := 0
	for _, r := range readAll(t, st) {
		switch r.RoutingKey {
		case "good":
		case "q":
			q++
		default:
			t.Fatalf("stored %q under %q", r.Payload, r.RoutingKey)
		}
	}
	if msg := verifyExactlyOnce(filterDrone(readAll(t, st), "good"), map[string]uint64{"good": 200}); msg != "" || q != 3 {
		t.Fatalf("good: %s; qos 0/1/2 stored %d, want 3", msg, q)
	}
}

// TestListenerWillClosesWriter: a drone whose connection dies without
// DISCONNECT has its will ("offline" on the status topic) delivered: its
// writer is closed after its events are durable.
func TestListenerWillClosesWriter(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	marks := newRecordingMarks()
	in, _ := startListener(t, listenConfig(), s, st, marks)
	c := dialRaw(t, in.ListenAddr().String())
	if rawConnect(t, c, "drone-w", false, 30, &[2]string{"drones/w/status", "offline"}) != packets.Accepted {
		t.Fatal("refused")
	}
	for seq := 1; seq <= 3; seq++ {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID = "drones/w/telemetry", 1, uint16(seq)
		p.Payload = fmt.Appendf(nil, `{"drone":"w","seq":%d}`, seq)
		p.Write(c)
	}
	for range 3 {
		if _, err := packets.ReadPacket(c); err != nil {
			t.Fatal(err)
		}
	}
	if in.Stats().WritersClosed != 0 {
		t.Fatal("closed before the connection died")
	}
	c.Close() // no DISCONNECT
	testkit.WaitFor(t, 10*time.Second, "writer closed", func() bool { return in.Stats().WritersClosed == 1 })
	marks.mu.Lock()
	defer marks.mu.Unlock()
	if marks.closes["telemetry/w"] != 1 || marks.closedAfter["telemetry/w"] != 3 {
		t.Fatalf("closes %v after %v notes", marks.closes, marks.closedAfter)
	}
	if got := in.Stats(); got.ListenerWills != 1 || got.StatusOffline != 1 {
		t.Fatalf("wills %d offline %d", got.ListenerWills, got.StatusOffline)
	}
}

// filterDrone keeps one drone's records.
func filterDrone(recs []localstream.Record, drone string) []localstream.Record {
	var out []localstream.Record
	for _, r := range recs {
		if r.RoutingKey == drone {
			out = append(out, r)
		}
	}
	return out
}

// TestListenerSessions: a persistent client's DUP resend of a message
// already stored — on a new connection that takes the session over — is
// acked and not stored again (the entry read back from the store); a
// clean-session CONNECT deletes the client's entries.
func TestListenerSessions(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, _ := startListener(t, listenConfig(), s, st, nil)
	addr := in.ListenAddr().String()
	pub := func(c net.Conn, id uint16, dup bool, payload string) {
		t.Helper()
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Dup, p.Payload = "drones/s/telemetry", 1, id, dup, []byte(payload)
		p.Write(c)
		ack, err := packets.ReadPacket(c)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := ack.(*packets.PubackPacket); !ok || a.MessageID != id {
			t.Fatalf("got %v, want PUBACK %d", ack, id)
		}
	}
	c1 := dialRaw(t, addr)
	if rawConnect(t, c1, "sess", false, 30, nil) != packets.Accepted {
		t.Fatal("refused")
	}
	pub(c1, 7, false, `{"seq":1}`)
	pub(c1, 8, false, `{"seq":2}`)
	if keys, _ := s.ScanMeta(ListenDedupPrefix + "sess/"); len(keys) != 2 {
		t.Fatalf("dedup entries %v", keys)
	}
	c2 := dialRaw(t, addr) // takes the session over; c1 is closed
	if rawConnect(t, c2, "sess", false, 30, nil) != packets.Accepted {
		t.Fatal("refused")
	}
	closedByServer(t, c1, 5*time.Second)
	pub(c2, 7, true, `{"seq":1}`) // a resend: skipped
	pub(c2, 8, true, `{"seq":3}`) // same id, other content: stored
	if got := in.Stats(); got.DuplicatesSkipped != 1 || got.Appended != 3 || got.ListenerTakeovers != 1 || got.ListenerWills != 0 {
		t.Fatalf("stats %+v", got)
	}
	c3 := dialRaw(t, addr)
	if rawConnect(t, c3, "sess", true, 30, nil) != packets.Accepted {
		t.Fatal("refused")
	}
	if keys, _ := s.ScanMeta(ListenDedupPrefix + "sess/"); len(keys) != 0 {
		t.Fatalf("a clean session left entries %v", keys)
	}
	pub(c3, 9, false, `{"seq":4}`)
	if keys, _ := s.ScanMeta(ListenDedupPrefix + "sess/"); len(keys) != 0 {
		t.Fatalf("a clean session wrote entries %v", keys)
	}
	var seqs []string
	for _, r := range readAll(t, st) {
		seqs = append(seqs, string(r.Payload))
	}
	if strings.Join(seqs, ",") != `{"seq":1},{"seq":2},{"seq":3},{"seq":4}` {
		t.Fatalf("stored %v", seqs)
	}
}

// TestListenerPacketIDReusedInFlight: a client reuses a packet id while
// its first message is in flight and resends that message with DUP in
// between; the resend's ack must not be lost with the replaced entry, or
// every later ack of the connection would wait for it forever.
func TestListenerPacketIDReusedInFlight(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, _ := startListener(t, listenConfig(), s, slowAppender{st, 20 * time.Millisecond}, nil)
	c := dialRaw(t, in.ListenAddr().String())
	if rawConnect(t, c, "reuser", false, 30, nil) != packets.Accepted {
		t.Fatal("refused")
	}
	var buf bytes.Buffer
	pub := func(id uint16, dup bool, payload string) {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Dup, p.Payload = "drones/r/telemetry", 1, id, dup, []byte(payload)
		p.Write(&buf)
	}
	pub(1, false, "A")
	pub(1, true, "A")  // waits on A's append
	pub(1, false, "B") // replaces A's entry while A is in flight
	pub(2, false, "C")
	c.Write(buf.Bytes())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []uint16
	for range 4 {
		p, err := packets.ReadPacket(c)
		if err != nil {
			t.Fatalf("after acks %v: %v", got, err)
		}
		got = append(got, p.(*packets.PubackPacket).MessageID)
	}
	if fmt.Sprint(got) != "[1 1 1 2]" {
		t.Fatalf("acks %v", got)
	}
}
