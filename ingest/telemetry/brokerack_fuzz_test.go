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
	// Above fuzzBound: a QoS 1 PUBLISH (skipped, acked), a QoS 0 one, and
	// a SUBACK (the connection refused).
	big := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	big.TopicName, big.Qos, big.MessageID, big.Payload = "drones/f/telemetry", 1, 9, bytes.Repeat([]byte{'x'}, 2*fuzzBound)
	add(big)
	big.Qos = 0
	add(big)
	out = append(out, append(appendRemainingLength([]byte{0x90}, fuzzBound+1), make([]byte, fuzzBound+1)...))
	out = append(out, []byte{0x30, 0xff, 0xff, 0xff, 0x7f}, []byte{0x32, 0x03, 0x00, 0x05, 'a'}, []byte{0x30, 0x01}, []byte{0x20})
	return out
}

// fuzzBound is the remaining length FuzzBrokerConn's brokerConn reads into
// memory (the agent's is max_payload + 64 KiB: too large for the fuzzer
// to reach often).
const fuzzBound = 64

// FuzzBrokerConn: whatever bytes come from the broker, brokerConn never
// panics; it hands paho exactly the packets it does not deliver itself —
// everything but PUBLISH of QoS 0 and 1 — byte for byte (the length in
// its shortest form) and in order, and
// delivers each of those PUBLISHes once; a QoS 0/1 PUBLISH over the bound
// is skipped and counted as oversize, any other packet over it ends the
// connection (ErrPacketTooLarge, broker_too_large); no buffer grows past
// the bound; it ends with the connection's error (EOF), ErrMalformed for
// a PUBLISH that does not decode, or ErrPacketTooLarge.
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
		publishes, skipped, tooLarge := uint64(0), uint64(0), uint64(0)
		r := bytes.NewReader(data)
		for {
			first, err := r.ReadByte()
			if err != nil {
				break
			}
			n, err := readLength(r)
			if err != nil {
				break
			}
			publish := first>>4 == packets.Publish && (first>>1)&3 < 2
			if n > fuzzBound && !publish {
				tooLarge++ // refused from its fixed header, body or not
				break
			}
			if n > r.Len() {
				break
			}
			r.Seek(int64(n), io.SeekCurrent)
			body := data[len(data)-r.Len()-n : len(data)-r.Len()]
			if n > fuzzBound {
				head := 2 + (int(body[0])<<8 | int(body[1])) // the topic, then the packet id
				if (first>>1)&3 == 1 {
					head += 2
				}
				if head > n {
					break
				}
				skipped++
				continue
			}
			if publish {
				p := packets.PublishPacket{FixedHeader: packets.FixedHeader{Qos: (first >> 1) & 3}}
				if mqttwire.UnpackPublish(&p, body, "") != nil {
					break
				}
				publishes++
				continue
			}
			// Byte for byte, the remaining length in its shortest form
			// (brokerConn encodes it again; MQTT 3.1.1 §2.2.3 allows
			// longer forms, as 0x80 0x00 for 0).
			want = append(appendRemainingLength(append(want, first), n), body...)
		}
		a, b := net.Pipe()
		go func() { b.Write(data); b.Close() }()
		bc := mqttwire.NewBufferedConn(a)
		defer bc.Close()
		c := &brokerConn{BufferedConn: bc, in: in, max: fuzzBound}
		var got []byte
		buf := make([]byte, 7) // paho reads a byte, the length, then the body
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if cap(c.buf.Body) > fuzzBound || cap(c.passBuf) > fuzzBound+5 {
				t.Fatalf("buffers grew to %d and %d, bound %d", cap(c.buf.Body), cap(c.passBuf), fuzzBound)
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, mqttwire.ErrMalformed) &&
					!errors.Is(err, mqttwire.ErrPacketTooLarge) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				break
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("paho got % x, want % x", got, want)
		}
		st := in.Stats()
		if st.Received != publishes+skipped || st.BrokerOversizeSkipped != skipped || st.Oversize != skipped || st.BrokerTooLarge != tooLarge {
			t.Fatalf("received %d, skipped %d, oversize %d, too large %d; want %d delivered, %d skipped, %d too large",
				st.Received, st.BrokerOversizeSkipped, st.Oversize, st.BrokerTooLarge, publishes, skipped, tooLarge)
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
