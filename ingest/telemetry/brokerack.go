package telemetry

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/mqttwire"
)

// The broker client reads the PUBLISH packets off its connection itself
// and writes their PUBACKs itself, four bytes into the same connection, as
// the listener does for its publishers; paho keeps the rest of the session:
// CONNECT, SUBSCRIBE, keep-alive, reconnect, DISCONNECT.
//
// Through paho, every message crossed three goroutines before the
// pipeline saw it (the socket reader, the incoming-comms loop, the ordered
// router: two channel hand-offs, each a wake-up of another goroutine on
// the one or two Ps the agent runs with), and every PUBACK took a closure
// and a packet, a formatted store key and a map delete (persistOutbound),
// and three more hand-offs (the router's ack channel, the output
// redirector, the outgoing writer) before a write of its own. On one P the
// hand-offs were most of the path's wait: the broker bridge drained the
// same Mosquitto faster (BENCHMARKS.md, issue 32).
//
// brokerConn sits between paho and the socket (tcp, TLS, ws and wss: the
// websocket too, whose packets paho would otherwise read with
// packets.ReadPacket, which allocates any remaining length the broker
// claims, up to 256 MiB). paho's reader goroutine
// calls its Read; Read reads whole packets from the socket: a PUBLISH of
// QoS 0 or 1 is delivered there and then, on that goroutine, in the order
// it came, and acknowledged on the connection it came on once durable;
// every other packet (CONNACK, SUBACK, PINGRESP, a QoS 2 PUBLISH, which a
// QoS 1 subscription never gets) is handed to paho byte for byte. A
// delivery that waits (lanes or the byte budget full) holds the reading,
// as paho's ordered delivery did: TCP then pushes back on the broker.
//
// A PUBACK for a connection that is gone fails its write and is dropped,
// as paho drops the acks of a lost connection: the broker delivers the
// message again (DUP) and the dedup entry skips it.
//
// What the broker claims is bounded as what a publisher claims on the
// listener: a packet is read into memory only up to
// mqttwire.PacketBound(MaxPayload) (max_payload + 64 KiB of topic room).
// A QoS 0 or 1 PUBLISH above it is skipped: its packet id is read, the
// rest (the topic and the payload) is discarded through the read buffer as it arrives
// (never held whole), and it is dropped and acked in its place of the ack
// order, as a payload over max_payload within the bound is (oversize,
// broker_oversize_skipped). It is acked, not refused by closing the
// connection: the broker keeps an unacked QoS 1 message in the session
// and sends it first again at every reconnect, so a connection closed on
// it would close again on the resend, forever, with every message queued
// behind it held — and MQTT 3.1.1 has neither a negative ack nor a way
// for the client to state its largest packet (MQTT 5's Maximum Packet
// Size, with which the broker drops such messages itself). Any other
// packet above the bound is a broken broker — the others a broker sends
// are a few bytes, and a QoS 2 PUBLISH never comes on the QoS 1
// subscription: the connection is closed before its body is read, with
// an error wrapping mqttwire.ErrPacketTooLarge that the connection-lost
// log line shows (broker_too_large), and paho reconnects.

// brokerConn is the broker client's tcp or TLS connection (see above).
type brokerConn struct {
	*mqttwire.BufferedConn
	in *Ingester
	// max bounds the remaining length read into memory (see above).
	max int
	// pass holds the bytes of a packet for paho that it has not read yet;
	// passBuf is its reused buffer; buf the PUBLISH body buffer (the
	// reading goroutine only).
	pass, passBuf []byte
	buf           mqttwire.PacketBuf
}

// Read hands paho the packets that are not delivered here, reading and
// delivering PUBLISH packets until one comes.
func (c *brokerConn) Read(p []byte) (int, error) {
	for len(c.pass) == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.pass)
	c.pass = c.pass[n:]
	return n, nil
}

// next reads one packet: a PUBLISH of QoS 0 or 1 is delivered, any other
// is left in c.pass for paho.
func (c *brokerConn) next() error {
	r := c.R
	first, err := r.ReadByte()
	if err != nil {
		return err
	}
	n, err := mqttwire.ReadRemainingLength(r)
	if err != nil {
		return err
	}
	typ, qos := first>>4, (first>>1)&0x03
	if n > c.max {
		if typ == packets.Publish && qos <= 1 {
			return c.skipPublish(first, n)
		}
		c.in.c.brokerTooLarge.Add(1)
		return fmt.Errorf("%w: from the broker: %s of remaining length %d > %d", mqttwire.ErrPacketTooLarge, packetName(typ), n, c.max)
	}
	if typ != packets.Publish || qos > 1 {
		b := appendRemainingLength(append(c.passBuf[:0], first), n)
		h := len(b)
		if cap(b) < h+n { // exactly the packet: at most the bound and its header
			b = append(make([]byte, 0, h+n), b...)
		}
		b = b[:h+n]
		if _, err := io.ReadFull(r, b[h:]); err != nil {
			return err
		}
		if cap(b) <= mqttwire.KeepBuffer {
			c.passBuf = b
		}
		c.pass = b
		return nil
	}
	buf := &c.buf.Body
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	body := (*buf)[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	p := packets.PublishPacket{FixedHeader: packets.FixedHeader{MessageType: typ, Dup: first&0x08 != 0, Qos: qos, Retain: first&0x01 != 0, RemainingLength: n}}
	if cap(*buf) > mqttwire.KeepBuffer {
		*buf = nil
	}
	if err := mqttwire.UnpackPublish(&p, body, c.buf.Topic); err != nil {
		return fmt.Errorf("telemetry: from the broker: %w", err)
	}
	c.buf.Topic = p.TopicName
	c.in.deliverBroker(&brokerMessage{topic: p.TopicName, payload: p.Payload, qos: qos, dup: p.Dup, retained: p.Retain, id: p.MessageID}, c.BufferedConn)
	return nil
}

// skipPublish reads a QoS 0 or 1 PUBLISH of remaining length n above the
// bound without holding any of it: its topic is discarded, its packet id
// read, the rest discarded as it arrives; then it is dropped and acked
// (see above).
func (c *brokerConn) skipPublish(first byte, n int) error {
	r := c.R
	qos := (first >> 1) & 0x03
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	topic := int(binary.BigEndian.Uint16(h[:]))
	head := 2 + topic
	if qos > 0 {
		head += 2 // the packet id
	}
	if head > n { // cannot be, a bound being at least 64 KiB: still, never a negative discard
		return fmt.Errorf("telemetry: from the broker: %w: PUBLISH header of %d bytes in %d", mqttwire.ErrMalformed, head, n)
	}
	if _, err := r.Discard(topic); err != nil {
		return err
	}
	m := &brokerMessage{qos: qos, dup: first&0x08 != 0, retained: first&0x01 != 0}
	if qos > 0 {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return err
		}
		m.id = binary.BigEndian.Uint16(h[:])
	}
	if _, err := r.Discard(n - head); err != nil {
		return err
	}
	c.in.dropSkipped(m, c.BufferedConn)
	return nil
}

// packetName names an MQTT packet type for an error.
func packetName(typ byte) string {
	if name, ok := packets.PacketNames[typ]; ok {
		return name
	}
	return fmt.Sprintf("packet type %d", typ)
}

// appendRemainingLength appends n as MQTT's remaining length (MQTT 3.1.1
// §2.2.3: 7 bits a byte, low first, bit 7 = more follows).
func appendRemainingLength(b []byte, n int) []byte {
	for {
		d := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// deliverBroker delivers a PUBLISH read off the broker connection conn,
// on its reading goroutine, in the order it came.
func (in *Ingester) deliverBroker(m *brokerMessage, conn *mqttwire.BufferedConn) {
	if !in.reserve(msgBytes(m)) {
		return // stopping: unacknowledged, the broker delivers it again
	}
	a := brokerAck{m: m}
	if m.qos == 1 {
		a.conn = conn
	}
	in.deliverMu.Lock()
	defer in.deliverMu.Unlock()
	n := in.brokerOrder.Number()
	in.deliver(m, func() { in.brokerOrder.Release(n, a, sendBrokerAck) }, in.brokerDedup, true)
}

// dropSkipped drops and acks, in its place of the ack order, a PUBLISH
// brokerConn skipped for its size (oversize, as deliver drops a payload
// over MaxPayload, whatever its topic).
func (in *Ingester) dropSkipped(m *brokerMessage, conn *mqttwire.BufferedConn) {
	in.c.received.Add(1)
	in.c.oversize.Add(1)
	in.c.brokerSkipped.Add(1)
	a := brokerAck{m: m}
	if m.qos == 1 {
		a.conn = conn
	}
	in.deliverMu.Lock()
	n := in.brokerOrder.Number()
	in.deliverMu.Unlock()
	in.ack(func() { in.brokerOrder.Release(n, a, sendBrokerAck) })
}

// brokerMessage is a PUBLISH read by brokerConn, shaped as paho's Message.
// Its PUBACK is written by sendBrokerAck; Ack does nothing.
type brokerMessage struct {
	topic    string
	payload  []byte
	qos      byte
	dup      bool
	retained bool
	id       uint16
}

func (m *brokerMessage) Duplicate() bool   { return m.dup }
func (m *brokerMessage) Qos() byte         { return m.qos }
func (m *brokerMessage) Retained() bool    { return m.retained }
func (m *brokerMessage) Topic() string     { return m.topic }
func (m *brokerMessage) MessageID() uint16 { return m.id }
func (m *brokerMessage) Payload() []byte   { return m.payload }
func (m *brokerMessage) Ack()              {}

// brokerAck is what one message from the broker is owed once durable.
type brokerAck struct {
	// conn is the connection the message came on; nil: ack through paho
	// (m.Ack): a message paho delivered (QoS 2), or QoS 0.
	conn *mqttwire.BufferedConn
	m    paho.Message
}

// sendBrokerAck sends a's PUBACK. Called on the acker goroutine; the
// write never waits for the network (bufferedConn's flusher does).
func sendBrokerAck(a brokerAck) {
	if a.conn == nil {
		a.m.Ack()
		return
	}
	var b [4]byte
	_, _ = a.conn.Write(mqttwire.AppendPubAck(b[:0], mqttwire.PubAck{ID: a.m.MessageID(), QoS: 1}))
}

// dialBroker is the broker client's dialer (tcp, TLS, ws, wss): dialConn,
// wrapped in a brokerConn that delivers the PUBLISH packets itself.
func (in *Ingester) dialBroker(uri *url.URL, o paho.ClientOptions) (net.Conn, error) {
	c, err := dialConn(uri, o)
	if err != nil {
		return nil, err
	}
	return &brokerConn{BufferedConn: c, in: in, max: mqttwire.PacketBound(in.cfg.MaxPayload)}, nil
}
