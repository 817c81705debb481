package mavlink

import (
	"encoding/binary"

	"github.com/bluenviron/gomavlib/v3/pkg/x25"
)

// MAVLink 1 frame (6 + len + 2 bytes):
//
//	 0      1     2     3       4        5       6 … 6+len-1   +2
//	+------+-----+-----+-------+--------+-------+-------------+-----+
//	| 0xFE | len | seq | sysid | compid | msgid |   payload   | crc |
//	+------+-----+-----+-------+--------+-------+-------------+-----+
//
// MAVLink 2 frame (10 + len + 2 [+ 13] bytes):
//
//	 0      1     2        3      4     5       6        7…9        10 …       +2     +13 (incompat & 1)
//	+------+-----+--------+------+-----+-------+--------+----------+---------+-----+--------------------------+
//	| 0xFD | len | incomp | comp | seq | sysid | compid | msgid LE | payload | crc | link id | ts (6) | sig (6) |
//	+------+-----+--------+------+-----+-------+--------+----------+---------+-----+--------------------------+
//
// crc is X.25 over every byte after the magic up to the end of the
// payload, then the message's CRC_EXTRA (from the dialect). The signature
// is the first 6 bytes of SHA-256(key ‖ every byte of the frame before it).
const (
	magicV1        = 0xFE
	magicV2        = 0xFD
	headerV1       = 6
	headerV2       = 10
	signatureLen   = 13
	flagSigned     = 0x01
	maxFrameLen    = headerV2 + 255 + 2 + signatureLen // 280
	minFrameLen    = headerV1 + 2
	signatureBytes = 6
)

// Frame is one MAVLink frame as received: Raw holds its bytes exactly,
// the other fields are read from them.
type Frame struct {
	// Raw is the whole frame, magic to checksum (and signature): the bytes
	// stored. It aliases the receive buffer until copied.
	Raw []byte
	// V2 is a MAVLink 2 frame.
	V2 bool
	// Seq, SysID, CompID and MsgID are the header's fields.
	Seq, SysID, CompID uint8
	MsgID              uint32
	// Payload is Raw's payload (aliased).
	Payload []byte
	// Signed: a MAVLink 2 frame with the signed flag (and its 13 bytes).
	Signed bool
	// CRC is the frame's checksum (right: split checked it).
	CRC uint16
	// info is the dialect's entry of the message.
	info *msgInfo
}

// splitResult says what split found at the start of a buffer.
type splitResult int

const (
	splitFrame   splitResult = iota // a frame whose checksum is right
	splitGarbage                    // the first byte starts no frame: skip it
	splitBadCRC                     // a frame shape whose checksum is wrong: skip its first byte
	splitUnknown                    // a frame of a message the dialect does not know: skip its first byte
	splitShort                      // the buffer ends inside what may be a frame: wait for more
)

// split is the intake's own frame parser, not gomavlib's frame.Reader,
// because the intake stores each frame byte for byte and the Reader
// cannot give those bytes: with a dialect it decodes the payload and, for
// a message with string fields or a v2 payload with trailing zeros,
// re-encodes it and recomputes the checksum (the bytes change); without a
// dialect it checks no checksum at all. It also reads an io.Reader, where
// the intake splits datagrams and resynchronises one byte at a time from
// buffers it owns (no copy, no allocation per frame). gomavlib's x25
// checksum and dialect (CRC_EXTRA) are used; the signature is checked equal
// to gomavlib's (signer.sign says why it is not called per frame).
// TestSplitGomavlibFrames reads what gomavlib writes.
//
// split reads the frame at the start of b. A checksum is only known for
// messages of the dialect (CRC_EXTRA): a frame of another message cannot
// be told from noise and is refused (splitUnknown), as a link could
// otherwise fill the store with random bytes that happen to look framed.
// On anything but splitFrame and splitShort the caller skips one byte and
// tries again (the MAVLink parsers' resynchronisation).
func split(b []byte, d *Dialect) (Frame, int, splitResult) {
	if len(b) == 0 {
		return Frame{}, 0, splitShort
	}
	var f Frame
	var hdr, n int
	switch b[0] {
	case magicV1:
		if len(b) < headerV1 {
			return f, 0, splitShort
		}
		hdr, n = headerV1, headerV1+int(b[1])+2
		if len(b) < n {
			return f, 0, splitShort
		}
		f.Seq, f.SysID, f.CompID, f.MsgID = b[2], b[3], b[4], uint32(b[5])
	case magicV2:
		if len(b) < 3 {
			return f, 0, splitShort
		}
		if b[2]&^flagSigned != 0 { // an incompatibility flag we do not know: no frame for us
			return f, 0, splitGarbage
		}
		if len(b) < headerV2 {
			return f, 0, splitShort
		}
		hdr, n = headerV2, headerV2+int(b[1])+2
		f.V2, f.Signed = true, b[2]&flagSigned != 0
		if f.Signed {
			n += signatureLen
		}
		if len(b) < n {
			return f, 0, splitShort
		}
		f.Seq, f.SysID, f.CompID = b[4], b[5], b[6]
		f.MsgID = uint32(b[7]) | uint32(b[8])<<8 | uint32(b[9])<<16
	default:
		return f, 0, splitGarbage
	}
	info, ok := d.lookup(f.MsgID)
	if !ok {
		return f, 0, splitUnknown
	}
	end := hdr + int(b[1])
	h := x25.New()
	h.Write(b[1:end])
	h.Write([]byte{info.crcExtra})
	if f.CRC = h.Sum16(); f.CRC != binary.LittleEndian.Uint16(b[end:]) {
		return Frame{}, 0, splitBadCRC
	}
	f.Raw, f.Payload, f.info = b[:n:n], b[hdr:end:end], info
	return f, n, splitFrame
}

// signatureParts returns the signed bytes, link id, timestamp (10 µs
// units since 2015-01-01) and signature of a signed frame.
func (f *Frame) signatureParts() (signed []byte, link uint8, ts uint64, sig []byte) {
	n := len(f.Raw)
	s := f.Raw[n-signatureLen:]
	var t [8]byte
	copy(t[:6], s[1:7])
	return f.Raw[:n-signatureBytes], s[0], binary.LittleEndian.Uint64(t[:]), s[7:]
}
