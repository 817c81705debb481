package mqttwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// packetSeeds are valid and broken packets: a CONNECT with a will, QoS 0,
// 1 and 2 PUBLISHes, PUBREL, PINGREQ, SUBSCRIBE, DISCONNECT, and garbage.
func packetSeeds() [][]byte {
	var out [][]byte
	add := func(p packets.ControlPacket) {
		var b bytes.Buffer
		p.Write(&b)
		out = append(out, b.Bytes())
	}
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.ClientIdentifier, cp.Keepalive = "MQTT", 4, "fuzz", 30
	cp.WillFlag, cp.WillTopic, cp.WillMessage, cp.WillQos = true, "drones/f/status", []byte("offline"), 1
	add(cp)
	for q := byte(0); q <= 2; q++ {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Payload = "drones/f/telemetry", q, uint16(q+1), []byte(`{"seq":1}`)
		add(p)
	}
	rel := packets.NewControlPacket(packets.Pubrel).(*packets.PubrelPacket)
	rel.MessageID = 3
	add(rel)
	add(packets.NewControlPacket(packets.Pingreq))
	sub := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	sub.MessageID, sub.Topics, sub.Qoss = 4, []string{"#"}, []byte{1}
	add(sub)
	add(packets.NewControlPacket(packets.Disconnect))
	out = append(out, []byte{0x30, 0xff, 0xff, 0xff, 0x7f}, []byte{0x10, 0x80, 0x80, 0x80, 0x80, 0x01}, []byte{0xf0, 0x00},
		[]byte{0x32, 0x03, 0x00, 0x05, 'a'}, []byte{0x10, 0x02, 0x00})
	return out
}

// FuzzReadPacket: any bytes are read as packets or refused with an error,
// never a panic; a packet's body never exceeds the bound, nor does the
// reused buffer grow past it; garbage is ErrMalformed or
// ErrPacketTooLarge, not a read that waits for more.
func FuzzReadPacket(f *testing.F) {
	for _, s := range packetSeeds() {
		f.Add(s)
	}
	all := bytes.Join(packetSeeds(), nil)
	f.Add(all)
	const max = 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var buf PacketBuf
		for range 64 {
			before := r.Buffered()
			cp, err := ReadPacket(r, max, &buf)
			if cap(buf.Body) > max {
				t.Fatalf("buffer grew to %d > %d", cap(buf.Body), max)
			}
			if err != nil {
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrPacketTooLarge) &&
					!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if cp == nil || (before == r.Buffered() && before != 0) {
				t.Fatal("a packet without consuming bytes")
			}
		}
	})
}

// FuzzUnpackPublish: the listener's PUBLISH decoder agrees with paho's
// Unpack on any body, whatever the last topic was: the same topic, packet
// id and payload, or both refuse it (the decoder with ErrMalformed).
func FuzzUnpackPublish(f *testing.F) {
	for _, s := range packetSeeds() {
		if len(s) > 2 && s[0]>>4 == packets.Publish {
			f.Add(s[2:], (s[0]>>1)&3, "drones/f/telemetry")
		}
	}
	f.Add([]byte{}, byte(0), "")
	f.Add([]byte{0x00}, byte(1), "")
	f.Add([]byte{0x00, 0x01, 'a'}, byte(1), "a")
	f.Add([]byte{0x00, 0x01, 'a', 0x00}, byte(2), "b")
	f.Add([]byte{0x00, 0x00}, byte(0), "")
	f.Fuzz(func(t *testing.T, body []byte, qos byte, last string) {
		fh := packets.FixedHeader{MessageType: packets.Publish, Qos: qos % 3, RemainingLength: len(body)}
		got := &packets.PublishPacket{FixedHeader: fh}
		err := UnpackPublish(got, body, last)
		want := &packets.PublishPacket{FixedHeader: fh}
		werr := want.Unpack(bytes.NewBuffer(bytes.Clone(body)))
		if (err != nil) != (werr != nil) {
			t.Fatalf("error %v, paho's %v", err, werr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if got.TopicName != want.TopicName || got.MessageID != want.MessageID || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("decoded %q %d % x, paho %q %d % x", got.TopicName, got.MessageID, got.Payload,
				want.TopicName, want.MessageID, want.Payload)
		}
		if len(body) > 0 && len(got.Payload) > 0 && &got.Payload[0] == &body[len(body)-len(got.Payload)] {
			t.Fatal("the payload aliases the reused body buffer")
		}
	})
}
