package telemetry

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

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

// FuzzListenerConn: any bytes sent to the listener over TCP end with the
// connection closed by the server — no panic, no hang — and the listener
// goes on serving.
func FuzzListenerConn(f *testing.F) {
	for _, s := range packetSeeds() {
		f.Add(s)
	}
	f.Add(bytes.Join(packetSeeds(), nil))
	s, st := openStore(f, f.TempDir())
	f.Cleanup(func() { s.Close() })
	cfg := listenConfig()
	cfg.MaxPayload = 1024
	in, _ := startListener(f, cfg, s, st, nil)
	addr := in.ListenAddr().String()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the listener did not close the connection")
			}
		}
	})
}
