package video

import (
	"encoding/binary"
	"fmt"
)

// depacketizer turns RTP payloads of one codec into NAL units (RFC 6184 for
// H.264, RFC 7798 for H.265). It keeps the state of one fragmented NAL unit.
// It does not know about frames or loss: the assembler resets it.
type depacketizer struct {
	codec Codec
	// fu is the fragmented NAL unit being reassembled (header included).
	fu []byte
	// inFU is true between a fragment with the start bit and one with the end bit.
	inFU bool
}

// reset forgets a partly reassembled NAL unit.
func (d *depacketizer) reset() { d.fu, d.inFU = d.fu[:0], false }

// push parses one RTP payload and calls emit for each complete NAL unit.
// The slice given to emit is only valid during the call.
func (d *depacketizer) push(payload []byte, emit func(nal []byte)) error {
	if d.codec == CodecH265 {
		return d.pushH265(payload, emit)
	}
	return d.pushH264(payload, emit)
}

// H.264 payload header (RFC 6184 §5.3), the first byte of every payload:
//
//	+---------------+
//	|0|1|2|3|4|5|6|7|
//	+-+-+-+-+-+-+-+-+
//	|F|NRI|  Type   |   Type 1-23 single NAL, 24 STAP-A, 28 FU-A
//	+---------------+
//
// STAP-A:  [hdr] ( [size16][NAL] )+
// FU-A:    [FU indicator (F|NRI|28)] [FU header S|E|R|Type] [fragment]
func (d *depacketizer) pushH264(p []byte, emit func([]byte)) error {
	if len(p) < 1 {
		return fmt.Errorf("%w: empty h264 payload", ErrMalformed)
	}
	if p[0]&0x80 != 0 {
		return fmt.Errorf("%w: h264 forbidden bit set", ErrMalformed)
	}
	switch t := p[0] & 0x1f; {
	case t >= 1 && t <= 23:
		if d.inFU {
			d.reset()
			return fmt.Errorf("%w: h264 nal inside fu-a", ErrFragment)
		}
		emit(p)
		return nil
	case t == 24:
		return aggregate(p[1:], 1, emit)
	case t == 28:
		if len(p) < 2 {
			return fmt.Errorf("%w: h264 fu-a of %d bytes", ErrMalformed, len(p))
		}
		return d.fragment(p[1]&0x80 != 0, p[1]&0x40 != 0, []byte{p[0]&0xe0 | p[1]&0x1f}, p[2:], emit)
	case t == 25 || t == 26 || t == 27 || t == 29:
		return fmt.Errorf("%w: h264 packet type %d", ErrUnsupported, t)
	default:
		return fmt.Errorf("%w: h264 packet type %d", ErrMalformed, t)
	}
}

// H.265 payload header (RFC 7798 §1.1.4), the first two bytes:
//
//	+---------------+---------------+
//	|0|1|2|3|4|5|6|7|0|1|2|3|4|5|6|7|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|   Type    |  LayerId  | TID |  Type 0-47 single NAL, 48 AP, 49 FU
//	+-------------+-----------------+
//
// AP:  [hdr2] ( [size16][NAL] )+       (no DONL: sprop-max-don-diff = 0)
// FU:  [hdr2 with Type 49] [FU header S|E|FuType(6)] [fragment]
func (d *depacketizer) pushH265(p []byte, emit func([]byte)) error {
	if len(p) < 2 {
		return fmt.Errorf("%w: h265 payload of %d bytes", ErrMalformed, len(p))
	}
	if p[0]&0x80 != 0 {
		return fmt.Errorf("%w: h265 forbidden bit set", ErrMalformed)
	}
	switch t := (p[0] >> 1) & 0x3f; {
	case t <= 47:
		if d.inFU {
			d.reset()
			return fmt.Errorf("%w: h265 nal inside fu", ErrFragment)
		}
		emit(p)
		return nil
	case t == 48:
		return aggregate(p[2:], 2, emit)
	case t == 49:
		if len(p) < 3 {
			return fmt.Errorf("%w: h265 fu of %d bytes", ErrMalformed, len(p))
		}
		fh := p[2]
		hdr := []byte{p[0]&0x81 | (fh&0x3f)<<1, p[1]}
		return d.fragment(fh&0x80 != 0, fh&0x40 != 0, hdr, p[3:], emit)
	default:
		return fmt.Errorf("%w: h265 packet type %d", ErrUnsupported, t)
	}
}

// aggregate splits an aggregation packet body (STAP-A, AP) into NAL units of
// at least minNAL bytes.
func aggregate(p []byte, minNAL int, emit func([]byte)) error {
	if len(p) == 0 {
		return fmt.Errorf("%w: empty aggregation packet", ErrMalformed)
	}
	for len(p) > 0 {
		if len(p) < 2 {
			return fmt.Errorf("%w: aggregation size field truncated", ErrMalformed)
		}
		n := int(binary.BigEndian.Uint16(p))
		if n < minNAL || n > len(p)-2 {
			return fmt.Errorf("%w: aggregated nal of %d bytes, %d left", ErrMalformed, n, len(p)-2)
		}
		emit(p[2 : 2+n])
		p = p[2+n:]
	}
	return nil
}

// fragment handles one fragmentation unit: hdr is the reconstructed NAL header.
func (d *depacketizer) fragment(start, end bool, hdr, frag []byte, emit func([]byte)) error {
	var err error
	switch {
	case start:
		if d.inFU {
			err = fmt.Errorf("%w: fragment start before previous end", ErrFragment)
		}
		d.fu = append(append(d.fu[:0], hdr...), frag...)
		d.inFU = true
	case !d.inFU:
		return fmt.Errorf("%w: fragment without start", ErrFragment)
	default:
		d.fu = append(d.fu, frag...)
	}
	if end {
		d.inFU = false
		if err == nil {
			emit(d.fu)
		}
		d.fu = d.fu[:0]
	}
	return err
}
