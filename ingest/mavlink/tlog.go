package mavlink

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// A tlog (QGroundControl, MAVProxy, Mission Planner) is a sequence of
// entries, each a receive time and one frame:
//
//	+--------------------------------+------------------------------+
//	| Unix µs, 8 bytes, big-endian   | MAVLink 1 or 2 frame         |
//	+--------------------------------+------------------------------+
//
// TlogEntry is one entry.
type TlogEntry struct {
	// Time is when the frame was received (the tlog's timestamp).
	Time time.Time
	// Frame is the frame's bytes as recorded.
	Frame []byte
}

// TlogReader reads a tlog's entries, checking each frame's checksum with
// the dialect. It is not safe for concurrent use.
type TlogReader struct {
	r   *bufio.Reader
	d   *Dialect
	buf [8 + maxFrameLen]byte
}

// NewTlogReader reads r with d (nil: DefaultDialect).
func NewTlogReader(r io.Reader, d *Dialect) *TlogReader {
	if d == nil {
		d = DefaultDialect()
	}
	return &TlogReader{r: bufio.NewReaderSize(r, 64<<10), d: d}
}

// Next returns the next entry (its Frame valid until the next call), or
// io.EOF at the end; a truncated entry or one whose bytes are no frame of
// the dialect is an error wrapping ErrTlog.
func (t *TlogReader) Next() (TlogEntry, error) {
	head, err := t.r.Peek(8 + headerV1)
	if errors.Is(err, io.EOF) && len(head) == 0 {
		return TlogEntry{}, io.EOF
	}
	if len(head) < 8+headerV1 {
		return TlogEntry{}, fmt.Errorf("%w: truncated entry (%d bytes at the end)", ErrTlog, len(head))
	}
	us := int64(binary.BigEndian.Uint64(head))
	// The frame's length from its header; then check it whole.
	n := 0
	switch head[8] {
	case magicV1:
		n = headerV1 + int(head[9]) + 2
	case magicV2:
		n = headerV2 + int(head[9]) + 2
		if head[10]&flagSigned != 0 {
			n += signatureLen
		}
	default:
		return TlogEntry{}, fmt.Errorf("%w: byte %#x where a frame starts", ErrTlog, head[8])
	}
	b := t.buf[:8+n]
	if _, err := io.ReadFull(t.r, b); err != nil {
		return TlogEntry{}, fmt.Errorf("%w: truncated frame: %w", ErrTlog, err)
	}
	f, m, res := split(b[8:], t.d)
	if res != splitFrame || m != n {
		return TlogEntry{}, fmt.Errorf("%w: entry at %d µs: not a frame of the dialect (%v)", ErrTlog, us, res)
	}
	return TlogEntry{Time: time.UnixMicro(us).UTC(), Frame: f.Raw}, nil
}

// AppendTlogEntry appends one entry to b.
func AppendTlogEntry(b []byte, at time.Time, frame []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMicro()))
	return append(b, frame...)
}

func (r splitResult) String() string {
	switch r {
	case splitFrame:
		return "frame"
	case splitGarbage:
		return "no frame"
	case splitBadCRC:
		return "wrong checksum"
	case splitUnknown:
		return "message not in the dialect"
	default:
		return "cut short"
	}
}
