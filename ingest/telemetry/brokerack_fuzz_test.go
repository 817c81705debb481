package telemetry

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/mqttwire"
)

// brokerSeeds are what a broker sends a subscriber: CONNACK, SUBACK,
// PINGRESP, PUBLISH of QoS 0, 1 (DUP, retained) and 2, and broken bytes.
func brokerSeeds() [][]byte {
	var out [][]byte
	add := func(p packets.ControlPacket) {
		var b bytes.Buffer
		p.Write(&b)
		out = append(out, b.Bytes())
	}
	add(packets.NewControlPacket(packets.Connack))
	sa := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
	sa.MessageID, sa.ReturnCodes = 1, []byte{1, 1}
	add(sa)
	add(packets.NewControlPacket(packets.Pingresp))
	for q := byte(0); q <= 2; q++ {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Payload = "drones/f/telemetry", q, uint16(q+1), []byte(`{"seq":1}`)
		p.Dup, p.Retain = q == 1, q == 2
		add(p)
	}
	out = append(out, []byte{0x30, 0xff, 0xff, 0xff, 0x7f}, []byte{0x32, 0x03, 0x00, 0x05, 'a'}, []byte{0x30, 0x01}, []byte{0x20})
	return out
}

// FuzzBrokerConn: whatever bytes come from the broker, brokerConn never
// panics; it hands paho exactly the packets it does not deliver itself —
// everything but PUBLISH of QoS 0 and 1 — byte for byte and in order, and
// delivers each of those PUBLISHes once; it ends with the connection's
// error (EOF) or ErrMalformed for a PUBLISH that does not decode.
func FuzzBrokerConn(f *testing.F) {
	for _, s := range brokerSeeds() {
		f.Add(s)
	}
	f.Add(bytes.Join(brokerSeeds(), nil))
	s, st := openStore(f, f.TempDir())
	f.Cleanup(func() { s.Close() })
	cfg := testConfig("tcp://127.0.0.1:1", "fuzz")
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := New(cfg, Sink{Stream: st, Meta: s})
		if err != nil {
			t.Fatal(err)
		}
		// What paho should get, and how many PUBLISHes should be
		// delivered, by the packet reader the listener uses.
		var want []byte
		publishes := uint64(0)
		r := bytes.NewReader(data)
		for {
			start := len(data) - r.Len()
			first, err := r.ReadByte()
			if err != nil {
				break
			}
			n, err := readLength(r)
			if err != nil || n > r.Len() {
				break
			}
			r.Seek(int64(n), io.SeekCurrent)
			if first>>4 == packets.Publish && (first>>1)&3 < 2 {
				body := data[len(data)-r.Len()-n : len(data)-r.Len()]
				p := packets.PublishPacket{FixedHeader: packets.FixedHeader{Qos: (first >> 1) & 3}}
				if mqttwire.UnpackPublish(&p, body, "") != nil {
					break
				}
				publishes++
				continue
			}
			want = append(want, data[start:len(data)-r.Len()]...)
		}
		a, b := net.Pipe()
		go func() { b.Write(data); b.Close() }()
		bc := mqttwire.NewBufferedConn(a)
		defer bc.Close()
		c := &brokerConn{BufferedConn: bc, in: in}
		var got []byte
		buf := make([]byte, 7) // paho reads a byte, the length, then the body
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, mqttwire.ErrMalformed) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				break
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("paho got % x, want % x", got, want)
		}
		if d := in.Stats().Received; d != publishes {
			t.Fatalf("delivered %d PUBLISHes, want %d", d, publishes)
		}
	})
}

// readLength decodes an MQTT remaining length (1 to 4 bytes).
func readLength(r *bytes.Reader) (int, error) {
	n, shift := 0, 0
	for range 4 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			return n, nil
		}
		shift += 7
	}
	return 0, mqttwire.ErrMalformed
}
