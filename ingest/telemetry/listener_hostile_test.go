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
		rng := rand.New(rand.NewPCG(seedFor(t), 1))
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
		waitFor(t, 5*time.Second, "protocol errors counted", func() bool { return in.Stats().ListenerProtocolErrors >= 5 })
	})
	t.Run("huge remaining length", func(t *testing.T) {
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
		waitFor(t, 5*time.Second, "too large counted", func() bool { return in.Stats().ListenerTooLarge == 2 })
	})
	t.Run("no connect", func(t *testing.T) {
		c := dialRaw(t, addr)
		closedByServer(t, c, 10*time.Second)
		waitFor(t, 5*time.Second, "connect timeout counted", func() bool { return in.Stats().ListenerConnectTimeouts == 1 })
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
		waitFor(t, 5*time.Second, "refused connects counted", func() bool { return in.Stats().ListenerConnectRefused == 2 })
	})
	t.Run("too many connections", func(t *testing.T) {
		var held []net.Conn
		for range 12 {
			held = append(held, dialRaw(t, addr))
		}
		waitFor(t, 5*time.Second, "refused counted", func() bool { return in.Stats().ListenerRefused >= 5 })
		for _, c := range held {
			c.Close()
		}
		waitFor(t, 5*time.Second, "slots back", func() bool { return in.Stats().ListenerConnections == 1 })
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
		waitFor(t, 5*time.Second, "counted", func() bool {
			st := in.Stats()
			return st.Oversize == 1 && st.ListenerSubscribeRefused == 1 && st.ListenerQoS2 == 1
		})
	})
	t.Run("silent client", func(t *testing.T) {
		c := dialRaw(t, addr)
		if rawConnect(t, c, "silent", true, 1, nil) != packets.Accepted {
			t.Fatal("refused")
		}
		closedByServer(t, c, 10*time.Second) // 1.5 × 1 s
		waitFor(t, 5*time.Second, "keep-alive counted", func() bool { return in.Stats().ListenerKeepAliveTimeouts == 1 })
	})
	if err := <-goodDone; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "stored", func() bool { return in.Stats().Appended == 200+3 })
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
	waitFor(t, 10*time.Second, "writer closed", func() bool { return in.Stats().WritersClosed == 1 })
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
