package telemetry

import (
	"net"
	"net/url"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// The broker client writes its PUBACKs itself, four bytes into the
// connection it dialed (dialBroker), as the listener does for its
// publishers. Through paho, every PUBACK took a closure and a packet, a
// formatted store key and a map delete (persistOutbound), and two channel
// hand-offs between goroutines (the router's ack channel, the output
// redirector, the outgoing writer) before a write of its own:
// BENCHMARKS.md, issue 32.
//
// A message is acknowledged on the connection it came on: paho delivers a
// connection's messages (ordered delivery: on its router goroutine) only
// after dialing it and stops that router before it dials the next, so the
// connection dialed last when a message is delivered is the one it came
// on. A PUBACK for a connection that is gone fails its write and is
// dropped, as paho drops the acks of a lost connection: the broker
// delivers the message again (DUP) and the dedup entry skips it. Over a
// connection paho dialed itself (ws, wss) the acks go through paho.

// brokerAck is what one message from the broker is owed once durable.
type brokerAck struct {
	// conn is the connection the message came on; nil: ack through paho
	// (m.Ack), for a websocket or a QoS other than 1.
	conn *bufferedConn
	m    paho.Message
}

// brokerAckOf is the ack of m, delivered now.
func (in *Ingester) brokerAckOf(m paho.Message) brokerAck {
	a := brokerAck{m: m}
	if m.Qos() == 1 {
		a.conn = in.brokerConn.Load()
	}
	return a
}

// sendBrokerAck sends a's PUBACK. Called on the acker goroutine; the
// write never waits for the network (bufferedConn's flusher does).
func sendBrokerAck(a brokerAck) {
	if a.conn == nil {
		a.m.Ack()
		return
	}
	var b [4]byte
	_, _ = a.conn.Write(appendPubAck(b[:0], pubAck{id: a.m.MessageID(), qos: 1}))
}

// dialBroker is the broker client's dialer (tcp and TLS): dialBuffered,
// keeping the connection as the one the next messages come on.
func (in *Ingester) dialBroker(uri *url.URL, o paho.ClientOptions) (net.Conn, error) {
	c, err := dialConn(uri, o)
	if err != nil {
		return nil, err
	}
	in.brokerConn.Store(c)
	return c, nil
}
