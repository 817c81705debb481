package mqttwire

import (
	"bytes"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// TestAppendPubAck: the hand-encoded PUBACK and PUBREC are paho's bytes.
func TestAppendPubAck(t *testing.T) {
	for _, a := range []PubAck{{ID: 1, QoS: 1}, {ID: 0xfffe, QoS: 1}, {ID: 0x1234, QoS: 2}} {
		var want bytes.Buffer
		if a.QoS == 2 {
			p := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
			p.MessageID = a.ID
			p.Write(&want)
		} else {
			p := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
			p.MessageID = a.ID
			p.Write(&want)
		}
		if got := AppendPubAck(nil, a); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%+v: % x, paho % x", a, got, want.Bytes())
		}
	}
}
