package localstream

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// StreamCut is a position in a whole stream: for each segment in it, the
// offset of the first event after the cut ("everything before these
// offsets"). A valid cut covers the key space [0,1) exactly once; whether it
// does depends on the stream's segments, so Topology.Validate checks it.
//
// Text form (stable, for CLIs and logs):
//
//	<stream>:<epoch>.<number>=<offset>[,<epoch>.<number>=<offset>...]
//
// with segments in ascending id order, e.g. "video:0.0=12,1.1=0,1.2=3".
//
// Binary form (for storage), version 1:
//
//	+---------+---------+----------------+------------------+----------+
//	| 'C' u8  | ver u8  | uvarint len +  | uvarint n, then  | crc32c   |
//	|         | = 1     | stream name    | n × (uvarint id, | (IEEE) of|
//	|         |         |                |  uvarint offset) | all prior|
//	+---------+---------+----------------+------------------+----------+
//
// A StreamCut is a value; the map must not be modified after it is shared.
type StreamCut struct {
	// Stream is the name of the stream the cut belongs to.
	Stream string
	// Positions maps each segment in the cut to its offset.
	Positions map[SegmentID]uint64
}

// Segments returns the cut's segment ids in ascending order.
func (c StreamCut) Segments() []SegmentID {
	return slices.Sorted(maps.Keys(c.Positions))
}

// IsZero reports whether the cut is empty (no stream, no positions).
func (c StreamCut) IsZero() bool { return c.Stream == "" && len(c.Positions) == 0 }

// Equal reports whether two cuts are identical.
func (c StreamCut) Equal(o StreamCut) bool {
	return c.Stream == o.Stream && maps.Equal(c.Positions, o.Positions)
}

// Clone returns a deep copy.
func (c StreamCut) Clone() StreamCut {
	return StreamCut{Stream: c.Stream, Positions: maps.Clone(c.Positions)}
}

// CutMap is a stream cut's JSON form in commit records and markers: the
// segment id in canonical decimal → offset. The stream name travels beside
// it.
type CutMap map[string]uint64

// Map returns the cut's JSON form; nil for a cut without positions.
func (c StreamCut) Map() CutMap {
	if c.Positions == nil {
		return nil
	}
	m := make(CutMap, len(c.Positions))
	for id, off := range c.Positions {
		m[strconv.FormatUint(uint64(id), 10)] = off
	}
	return m
}

// Cut converts m back to a cut of the named stream (nil gives the zero
// cut). It checks the syntax only (ErrCorruptCut); validate the cut
// against the stream's topology before using it.
func (m CutMap) Cut(stream string) (StreamCut, error) {
	if m == nil {
		return StreamCut{}, nil
	}
	c := StreamCut{Stream: stream, Positions: make(map[SegmentID]uint64, len(m))}
	for k, off := range m {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil || strconv.FormatUint(id, 10) != k {
			return StreamCut{}, fmt.Errorf("%w: segment id %q is not a canonical decimal", ErrCorruptCut, k)
		}
		c.Positions[SegmentID(id)] = off
	}
	return c, nil
}

// String returns the text form.
func (c StreamCut) String() string {
	var b strings.Builder
	b.WriteString(c.Stream)
	b.WriteByte(':')
	for i, id := range c.Segments() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d.%d=%d", id.Epoch(), id.Number(), c.Positions[id])
	}
	return b.String()
}

// ParseStreamCut decodes the text form. It checks syntax only; use
// Topology.Validate to check the cut against a stream.
func ParseStreamCut(s string) (StreamCut, error) {
	name, rest, ok := strings.Cut(s, ":")
	if !ok {
		return StreamCut{}, fmt.Errorf("%w: missing ':' after stream name in %q", ErrCorruptCut, s)
	}
	if err := ValidateStreamName(name); err != nil {
		return StreamCut{}, fmt.Errorf("%w: %w", ErrCorruptCut, err)
	}
	c := StreamCut{Stream: name, Positions: map[SegmentID]uint64{}}
	if rest == "" {
		return StreamCut{}, fmt.Errorf("%w: no segments in %q", ErrCorruptCut, s)
	}
	for part := range strings.SplitSeq(rest, ",") {
		seg, off, ok := strings.Cut(part, "=")
		if !ok {
			return StreamCut{}, fmt.Errorf("%w: entry %q is not <epoch>.<number>=<offset>", ErrCorruptCut, part)
		}
		es, ns, ok := strings.Cut(seg, ".")
		if !ok {
			return StreamCut{}, fmt.Errorf("%w: segment %q is not <epoch>.<number>", ErrCorruptCut, seg)
		}
		epoch, err1 := strconv.ParseUint(es, 10, 32)
		number, err2 := strconv.ParseUint(ns, 10, 32)
		offset, err3 := strconv.ParseUint(off, 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return StreamCut{}, fmt.Errorf("%w: entry %q has a bad number", ErrCorruptCut, part)
		}
		id := NewSegmentID(uint32(epoch), uint32(number))
		if _, dup := c.Positions[id]; dup {
			return StreamCut{}, fmt.Errorf("%w: segment %s twice", ErrCorruptCut, id)
		}
		c.Positions[id] = offset
	}
	return c, nil
}

const (
	cutMagic   = 'C'
	cutVersion = 1
)

// MarshalBinary returns the binary form.
func (c StreamCut) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 8+len(c.Stream)+len(c.Positions)*12)
	b = append(b, cutMagic, cutVersion)
	b = binary.AppendUvarint(b, uint64(len(c.Stream)))
	b = append(b, c.Stream...)
	b = binary.AppendUvarint(b, uint64(len(c.Positions)))
	for _, id := range c.Segments() {
		b = binary.AppendUvarint(b, uint64(id))
		b = binary.AppendUvarint(b, c.Positions[id])
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// UnmarshalBinary decodes the binary form, checking its checksum.
func (c *StreamCut) UnmarshalBinary(b []byte) error {
	if len(b) < 2+1+1+4 {
		return fmt.Errorf("%w: %d bytes is too short", ErrCorruptCut, len(b))
	}
	if b[0] != cutMagic {
		return fmt.Errorf("%w: bad magic %#x", ErrCorruptCut, b[0])
	}
	if b[1] != cutVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrCorruptCut, b[1], cutVersion)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.ChecksumIEEE(body); got != sum {
		return fmt.Errorf("%w: checksum %#x, want %#x", ErrCorruptCut, got, sum)
	}
	r := body[2:]
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(len(r)-k) {
		return fmt.Errorf("%w: bad stream name length", ErrCorruptCut)
	}
	name := string(r[k : k+int(n)])
	r = r[k+int(n):]
	if err := ValidateStreamName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptCut, err)
	}
	cnt, k := binary.Uvarint(r)
	if k <= 0 || cnt == 0 || cnt > uint64(len(r)) {
		return fmt.Errorf("%w: bad segment count", ErrCorruptCut)
	}
	r = r[k:]
	pos := make(map[SegmentID]uint64, cnt)
	for range cnt {
		id, k1 := binary.Uvarint(r)
		if k1 <= 0 {
			return fmt.Errorf("%w: truncated segment id", ErrCorruptCut)
		}
		off, k2 := binary.Uvarint(r[k1:])
		if k2 <= 0 {
			return fmt.Errorf("%w: truncated offset", ErrCorruptCut)
		}
		if _, dup := pos[SegmentID(id)]; dup {
			return fmt.Errorf("%w: segment %s twice", ErrCorruptCut, SegmentID(id))
		}
		pos[SegmentID(id)] = off
		r = r[k1+k2:]
	}
	if len(r) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptCut, len(r))
	}
	c.Stream, c.Positions = name, pos
	return nil
}

// MarshalText returns the text form (for JSON and YAML); the zero cut is "".
func (c StreamCut) MarshalText() ([]byte, error) {
	if c.IsZero() {
		return nil, nil
	}
	return []byte(c.String()), nil
}

// UnmarshalText decodes the text form; "" is the zero cut.
func (c *StreamCut) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*c = StreamCut{}
		return nil
	}
	p, err := ParseStreamCut(string(b))
	if err != nil {
		return err
	}
	*c = p
	return nil
}
