package telemetry

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/gorilla/websocket"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// rawBroker is a peer on a real socket (tcp, or a websocket: scheme
// "ws") that speaks just enough MQTT 3.1.1 to be the agent's broker: it
// answers CONNECT and SUBSCRIBE, PINGREQ, and sends whatever bytes a test
// writes, so that a test can claim what no real broker would.
type rawBroker struct {
	t      *testing.T
	scheme string
	ln     net.Listener
	// conns receives the agent's connections.
	conns chan net.Conn
}

func newRawBroker(t *testing.T, scheme string) *rawBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBroker{t: t, scheme: scheme, ln: ln, conns: make(chan net.Conn, 4)}
	if scheme == "ws" {
		up := websocket.Upgrader{Subprotocols: []string{"mqtt"}}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			b.conns <- &wsNetConn{Conn: c}
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return b
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns <- c
		}
	}()
	return b
}

func (b *rawBroker) url() string { return b.scheme + "://" + b.ln.Addr().String() }

// wsNetConn is a server's websocket as a byte stream (binary messages,
// as MQTT over websockets sends).
type wsNetConn struct {
	*websocket.Conn
	r io.Reader
}

func (c *wsNetConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			_, r, err := c.NextReader()
			if err != nil {
				return 0, err
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsNetConn) Write(p []byte) (int, error) {
	if err := c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsNetConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// rawSession is one agent connection, past its CONNECT and SUBSCRIBE.
type rawSession struct {
	c net.Conn
	// mu serializes writes (the test's and the PINGRESPs).
	mu sync.Mutex
	// acks receives the packet ids the agent PUBACKs; ended is closed
	// when the agent's side of the connection ends.
	acks  chan uint16
	ended chan struct{}
}

// accept waits (up to timeout) for the agent to connect and subscribe.
func (b *rawBroker) accept(timeout time.Duration) *rawSession {
	b.t.Helper()
	var c net.Conn
	select {
	case c = <-b.conns:
	case <-time.After(timeout):
		b.t.Fatalf("the agent did not connect in %s", timeout)
	}
	b.t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	s := &rawSession{c: c, acks: make(chan uint16, 16), ended: make(chan struct{})}
	cp, err := packets.ReadPacket(r)
	if _, ok := cp.(*packets.ConnectPacket); !ok || err != nil {
		b.t.Fatalf("first packet %v, %v; want CONNECT", cp, err)
	}
	s.write(packets.NewControlPacket(packets.Connack))
	cp, err = packets.ReadPacket(r)
	sub, ok := cp.(*packets.SubscribePacket)
	if !ok || err != nil {
		b.t.Fatalf("second packet %v, %v; want SUBSCRIBE", cp, err)
	}
	sa := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
	sa.MessageID = sub.MessageID
	for range sub.Topics {
		sa.ReturnCodes = append(sa.ReturnCodes, 1)
	}
	s.write(sa)
	go func() {
		defer close(s.ended)
		for {
			cp, err := packets.ReadPacket(r)
			if err != nil {
				return
			}
			switch p := cp.(type) {
			case *packets.PubackPacket:
				s.acks <- p.MessageID
			case *packets.PingreqPacket:
				s.write(packets.NewControlPacket(packets.Pingresp))
			}
		}
	}()
	return s
}

func (s *rawSession) write(p packets.ControlPacket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.Write(s.c)
}

// writeHuge sends a packet of type first whose remaining length claims n
// bytes: head, then zeros up to n (none if !body).
func (s *rawSession) writeHuge(first byte, n int, head []byte, body bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := appendRemainingLength([]byte{first}, n)
	if _, err := s.c.Write(append(b, head...)); err != nil || !body {
		return err
	}
	chunk := make([]byte, 1<<20)
	for left := n - len(head); left > 0; left -= len(chunk) {
		if _, err := s.c.Write(chunk[:min(left, len(chunk))]); err != nil {
			return err
		}
	}
	return nil
}

// publishHead is a PUBLISH's topic and, for QoS 1, packet id.
func publishHead(topic string, id uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(topic)))
	b = append(b, topic...)
	if id != 0 {
		b = binary.BigEndian.AppendUint16(b, id)
	}
	return b
}

// totalAlloc is the bytes allocated on the heap so far.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// maxHugeAlloc bounds what a 200 MiB claim may cost the agent's heap.
const maxHugeAlloc = 32 << 20

// TestBrokerHugePublishSkipped: a broker that sends a PUBLISH of 200 MiB
// (remaining length and body, over a real socket) costs the agent no more
// than its bound in memory: the message is read past as it arrives,
// dropped and acked as oversize (QoS 1: PUBACKed, so the broker never
// sends it again), and the messages after it on the same connection are
// stored and acked in order — no reconnect, no loop. Before the bound,
// brokerConn allocated the whole claimed length (TotalAlloc grew by
// 200 MiB).
func TestBrokerHugePublishSkipped(t *testing.T) {
	for _, tc := range []struct {
		name, scheme string
		first        byte
		id           uint16
	}{
		{"qos1", "tcp", 0x32, 7},
		{"qos0", "tcp", 0x30, 0},
		{"qos1-dup-retained", "tcp", 0x3b, 9},
		{"qos1-websocket", "ws", 0x32, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newRawBroker(t, tc.scheme)
			s, st := openStore(t, t.TempDir())
			t.Cleanup(func() { s.Close() })
			cfg := testConfig(b.url(), "huge")
			// paho's PINGRESP waits behind the 200 MiB: on a loaded
			// machine its 2 s would cut the connection mid-skip.
			cfg.KeepAlive = 30 * time.Second
			in, _ := runIngester(t, cfg, s, st, nil)
			sess := b.accept(10 * time.Second)
			<-in.Subscribed()

			const huge = 200 << 20
			runtime.GC()
			before := totalAlloc()
			if err := sess.writeHuge(tc.first, huge, publishHead("drones/d1/telemetry/pos", tc.id), true); err != nil {
				t.Fatalf("send 200 MiB: %v", err)
			}
			good := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
			good.TopicName, good.Qos, good.MessageID, good.Payload = "drones/d1/telemetry/pos", 1, 8, []byte(`{"seq":1}`)
			sess.write(good)
			var got []uint16
			wantAcks := 2
			if tc.id == 0 {
				wantAcks = 1
			}
			for len(got) < wantAcks {
				select {
				case id := <-sess.acks:
					got = append(got, id)
				case <-sess.ended:
					t.Fatalf("the agent closed the connection (acks %v, stats %+v)", got, in.Stats())
				case <-time.After(20 * time.Second):
					t.Fatalf("acks %v after 20 s (stats %+v)", got, in.Stats())
				}
			}
			grew := totalAlloc() - before
			t.Logf("heap allocated while 200 MiB were claimed and sent: %.1f MiB; acks %v", float64(grew)/(1<<20), got)
			if grew > maxHugeAlloc {
				t.Fatalf("the agent allocated %.1f MiB for a 200 MiB PUBLISH (bound %d MiB)", float64(grew)/(1<<20), maxHugeAlloc>>20)
			}
			want := []uint16{tc.id, 8}
			if tc.id == 0 {
				want = want[1:]
			}
			if !equalIDs(got, want) {
				t.Fatalf("PUBACKs %v, want %v (in order)", got, want)
			}
			testkit.WaitFor(t, 5*time.Second, "the good message appended", func() bool { return in.Stats().Appended == 1 })
			stats := in.Stats()
			if stats.Oversize != 1 || stats.BrokerOversizeSkipped != 1 || stats.Received != 2 || stats.Connects != 1 || stats.ConnectionLost != 0 {
				t.Fatalf("stats %+v: want 1 oversize skipped, 2 received, one connection", stats)
			}
			recs := readAll(t, st)
			if len(recs) != 1 || !bytes.Equal(recs[0].Payload, good.Payload) {
				t.Fatalf("stored %d records, want the good one only", len(recs))
			}
		})
	}
}

func equalIDs(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBrokerHugeControlPacketClosed: any other packet from the broker
// that claims 200 MiB (a PINGRESP here; a broker's other packets are a few
// bytes) closes the connection at once, before its body is read or
// allocated, counted (broker_too_large), and the agent reconnects. Before
// the bound, brokerConn allocated 200 MiB and waited for the body.
func TestBrokerHugeControlPacketClosed(t *testing.T) {
	b := newRawBroker(t, "tcp")
	s, st := openStore(t, t.TempDir())
	t.Cleanup(func() { s.Close() })
	in, _ := runIngester(t, testConfig(b.url(), "huge-ctl"), s, st, nil)
	sess := b.accept(10 * time.Second)
	<-in.Subscribed()
	runtime.GC()
	before := totalAlloc()
	if err := sess.writeHuge(0xd0, 200<<20, nil, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection is still open 10 s after a PINGRESP of 200 MiB was claimed; heap allocated %.1f MiB meanwhile",
			float64(totalAlloc()-before)/(1<<20))
	}
	grew := totalAlloc() - before
	t.Logf("heap allocated: %.1f MiB", float64(grew)/(1<<20))
	if grew > maxHugeAlloc {
		t.Fatalf("the agent allocated %.1f MiB for a claimed 200 MiB PINGRESP", float64(grew)/(1<<20))
	}
	b.accept(10 * time.Second) // paho reconnects
	testkit.WaitFor(t, 5*time.Second, "the loss counted", func() bool {
		st := in.Stats()
		return st.BrokerTooLarge == 1 && st.ConnectionLost == 1 && st.Connects == 2
	})
}
