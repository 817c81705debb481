package mqttwire

import "github.com/eclipse/paho.mqtt.golang/packets"

// PubAck is the acknowledgement a PUBLISH is owed: a PUBACK (QoS 1) or a
// PUBREC (QoS 2) of its packet id; None: a refused message's, never sent.
type PubAck struct {
	ID   uint16
	QoS  byte
	None bool
}

// AppendPubAck appends a's packet: the fixed header (type, no flags,
// remaining length 2) and the packet id, big-endian (MQTT 3.1.1 §3.4,
// §3.5). Encoded here, not by paho's packets, which allocate a buffer and
// a packet for each of these four bytes.
func AppendPubAck(b []byte, a PubAck) []byte {
	t := byte(packets.Puback << 4)
	if a.QoS == 2 {
		t = packets.Pubrec << 4
	}
	return append(b, t, 2, byte(a.ID>>8), byte(a.ID))
}
