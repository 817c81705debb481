package mqttwire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// The listener and the broker client read each packet's fixed header itself and hands the rest
// to paho's packets (packets.ReadPacket would allocate whatever remaining
// length the peer claims, up to 256 MB, before reading a byte of it):
//
//	 7 6 5 4 3 2 1 0
//	+-------+-------+
//	| type  | flags |   flags: DUP, QoS (2 bits), RETAIN for PUBLISH
//	+-------+-------+
//	| remaining length: 1 to 4 bytes, 7 bits each, low first,
//	| bit 7 = more follows (MQTT 3.1.1 §2.2.3)
//	+---------------
//	| remaining length bytes: variable header and payload
//
// A remaining length above the bound is refused (ErrPacketTooLarge) before
// anything is allocated; then the body is read into a buffer that the
// connection reuses and unpacked by paho.

// KeepBuffer is the largest body buffer a connection keeps between packets.
const KeepBuffer = 16 << 10

// MaxPublishOverhead is what a PUBLISH (or a CONNECT) holds beyond its
// payload: a topic (at most 65,535 bytes, as MQTT strings are), its
// length, the packet id.
const MaxPublishOverhead = 65535 + 2 + 2

// PacketBound is the largest remaining length read into memory for a
// payload bound of maxPayload: the payload and MaxPublishOverhead.
func PacketBound(maxPayload int) int { return maxPayload + MaxPublishOverhead }

// PacketBuf is what a connection's reads reuse from packet to packet.
type PacketBuf struct {
	// Body is the packet body buffer (grown as needed up to the bound).
	Body []byte
	// Topic is the last PUBLISH's topic: a publisher sends one or a few
	// topics, and the next PUBLISH on the same topic shares the string
	// instead of allocating its own.
	Topic string
}

// ReadPacket reads one packet of at most max remaining bytes into pb's
// buffers. Errors wrap ErrPacketTooLarge, ErrMalformed or the reader's
// error.
func ReadPacket(r *bufio.Reader, max int, pb *PacketBuf) (packets.ControlPacket, error) {
	buf := &pb.Body
	first, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	n, err := ReadRemainingLength(r)
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("%w: remaining length %d > %d", ErrPacketTooLarge, n, max)
	}
	fh := packets.FixedHeader{
		MessageType: first >> 4, Dup: first&0x08 != 0, Qos: (first >> 1) & 0x03, Retain: first&0x01 != 0,
		RemainingLength: n,
	}
	if fh.MessageType == 0 || fh.MessageType == 15 {
		return nil, fmt.Errorf("%w: packet type %d", ErrMalformed, fh.MessageType)
	}
	if fh.Qos == 3 {
		return nil, fmt.Errorf("%w: qos 3", ErrMalformed)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	body := (*buf)[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	if fh.MessageType == packets.Publish { // nearly every packet: decoded here
		p := &packets.PublishPacket{FixedHeader: fh}
		if cap(*buf) > KeepBuffer {
			*buf = nil
		}
		if err := UnpackPublish(p, body, pb.Topic); err != nil {
			return nil, err
		}
		pb.Topic = p.TopicName
		return p, nil
	}
	cp, err := packets.NewControlPacketWithHeader(fh)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	// A bytes.Buffer, as packets.ReadPacket uses: its Read of an empty
	// payload returns no error (a bytes.Reader's returns io.EOF). Unpack
	// copies what it keeps (the payload, strings), so buf can be reused.
	if cap(*buf) > KeepBuffer {
		*buf = nil // a rare large packet: do not hold its buffer for the connection's life
	}
	if err := cp.Unpack(bytes.NewBuffer(body)); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, packets.PacketNames[fh.MessageType], err)
	}
	return cp, nil
}

// ReadRemainingLength decodes the 1 to 4 byte remaining length.
func ReadRemainingLength(r *bufio.Reader) (int, error) {
	n, shift := 0, 0
	for i := 0; i < 4; i++ {
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
	return 0, fmt.Errorf("%w: remaining length longer than 4 bytes", ErrMalformed)
}

// UnpackPublish decodes a PUBLISH's body (MQTT 3.1.1 §3.3.2) into p, as
// paho's Unpack does but without its reader and intermediate copies
// (three allocations fewer per message). The payload is copied: body is
// the connection's reused buffer.
//
//	+--------------+-------+----------------------+---------+
//	| topic length | topic | packet id (QoS 1, 2) | payload |
//	| 2 bytes, BE  |       | 2 bytes, BE          | the rest|
//	+--------------+-------+----------------------+---------+
//
// A body too short for its topic or packet id is ErrMalformed. A topic
// equal to last is last (no allocation).
func UnpackPublish(p *packets.PublishPacket, body []byte, last string) error {
	if len(body) < 2 {
		return fmt.Errorf("%w: PUBLISH of %d bytes", ErrMalformed, len(body))
	}
	n := int(binary.BigEndian.Uint16(body))
	rest := body[2:]
	if len(rest) < n {
		return fmt.Errorf("%w: PUBLISH topic of %d bytes in %d", ErrMalformed, n, len(rest))
	}
	if t := rest[:n]; string(t) == last {
		p.TopicName = last
	} else {
		p.TopicName = string(t)
	}
	rest = rest[n:]
	if p.Qos > 0 {
		if len(rest) < 2 {
			return fmt.Errorf("%w: PUBLISH without its packet id", ErrMalformed)
		}
		p.MessageID, rest = binary.BigEndian.Uint16(rest), rest[2:]
	}
	p.Payload = append(make([]byte, 0, len(rest)), rest...)
	return nil
}
