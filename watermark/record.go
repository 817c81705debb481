package watermark

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/edge-agent/edge-agent/localstream"
)

// Persisted records; layouts are drawn in doc.go.
const (
	writerMagic    = 'W'
	watermarkMagic = 'M'
	recordVersion  = 1

	flagClosed  = 1 << 0
	flagHasMark = 1 << 1
	flagHasBase = 1 << 2
	flagsKnown  = flagClosed | flagHasMark | flagHasBase

	// maxPositions bounds the positions a record may hold (a writer has
	// one per open segment it writes to).
	maxPositions = 4096
)

// writerRecord is the persisted state of one writer.
type writerRecord struct {
	closed, hasMark bool
	noted, maxSeen  int64
	lastActive      int64
	floor           int64
	pos             []localstream.Position
	base            *mark
}

func appendPositions(b []byte, ps []localstream.Position) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p.Segment))
		b = binary.AppendUvarint(b, p.Offset)
	}
	return b
}

func (r writerRecord) marshal() []byte {
	b := make([]byte, 0, 48+len(r.pos)*12)
	var flags byte
	if r.closed {
		flags |= flagClosed
	}
	if r.hasMark {
		flags |= flagHasMark
	}
	if r.base != nil {
		flags |= flagHasBase
	}
	b = append(b, writerMagic, recordVersion, flags)
	b = binary.AppendVarint(b, r.noted)
	b = binary.AppendVarint(b, r.maxSeen)
	b = binary.AppendVarint(b, r.lastActive)
	b = binary.AppendVarint(b, r.floor)
	b = appendPositions(b, r.pos)
	if r.base != nil {
		b = binary.AppendVarint(b, r.base.t)
		b = appendPositions(b, r.base.pos)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// recDecoder reads a record body; the first error sticks.
type recDecoder struct {
	b   []byte
	err error
}

func (d *recDecoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Varint(d.b)
	if k <= 0 || k != varintLen(v) {
		// Non-minimal encodings are refused: the form is canonical.
		d.err = fmt.Errorf("%w: bad %s", ErrCorruptRecord, what)
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *recDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 || k != uvarintLen(v) {
		d.err = fmt.Errorf("%w: bad %s", ErrCorruptRecord, what)
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *recDecoder) positions() []localstream.Position {
	n := d.uvarint("position count")
	if d.err != nil {
		return nil
	}
	if n > maxPositions || n > uint64(len(d.b))/2 {
		d.err = fmt.Errorf("%w: %d positions in %d bytes", ErrCorruptRecord, n, len(d.b))
		return nil
	}
	var ps []localstream.Position
	for range n {
		seg := d.uvarint("segment id")
		off := d.uvarint("offset")
		ps = append(ps, localstream.Position{Segment: localstream.SegmentID(seg), Offset: off})
	}
	return ps
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}

func uvarintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}

// checkFrame verifies magic, version and checksum and returns the body
// after the two header bytes.
func checkFrame(b []byte, magic byte, what string) ([]byte, error) {
	if len(b) < 2+4 {
		return nil, fmt.Errorf("%w: %s of %d bytes is too short", ErrCorruptRecord, what, len(b))
	}
	if b[0] != magic {
		return nil, fmt.Errorf("%w: %s with magic %#x", ErrCorruptRecord, what, b[0])
	}
	if b[1] != recordVersion {
		return nil, fmt.Errorf("%w: %s version %d, want %d", ErrUnsupportedVersion, what, b[1], recordVersion)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.ChecksumIEEE(body); got != sum {
		return nil, fmt.Errorf("%w: %s checksum %#x, want %#x", ErrCorruptRecord, what, got, sum)
	}
	return body[2:], nil
}

func unmarshalWriterRecord(b []byte) (writerRecord, error) {
	body, err := checkFrame(b, writerMagic, "writer record")
	if err != nil {
		return writerRecord{}, err
	}
	if len(body) < 1 {
		return writerRecord{}, fmt.Errorf("%w: writer record without flags", ErrCorruptRecord)
	}
	flags := body[0]
	if flags&^flagsKnown != 0 {
		return writerRecord{}, fmt.Errorf("%w: unknown flags %#x", ErrCorruptRecord, flags)
	}
	d := &recDecoder{b: body[1:]}
	r := writerRecord{closed: flags&flagClosed != 0, hasMark: flags&flagHasMark != 0}
	r.noted = d.varint("noted time")
	r.maxSeen = d.varint("max seen time")
	r.lastActive = d.varint("last active time")
	r.floor = d.varint("floor")
	r.pos = d.positions()
	if flags&flagHasBase != 0 {
		t := d.varint("base time")
		r.base = &mark{t: t, pos: d.positions()}
	}
	if d.err != nil {
		return writerRecord{}, d.err
	}
	if len(d.b) != 0 {
		return writerRecord{}, fmt.Errorf("%w: %d trailing bytes", ErrCorruptRecord, len(d.b))
	}
	return r, nil
}

// maxWatermarks bounds the watermarks of one record.
const maxWatermarks = 64

// Flags of a watermark record.
const (
	// wmFlagPruned: older watermarks were dropped before the first one held.
	wmFlagPruned = 1 << 0
	wmFlagsKnown = wmFlagPruned
)

// marshalWatermarks encodes watermarks, oldest first.
func marshalWatermarks(ws []Watermark, flags byte) ([]byte, error) {
	b := make([]byte, 0, 8+len(ws)*48)
	b = append(b, watermarkMagic, recordVersion, flags)
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for _, w := range ws {
		cut, err := w.Cut.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = binary.AppendVarint(b, w.LowerNs)
		b = binary.AppendVarint(b, w.UpperNs)
		b = binary.AppendUvarint(b, uint64(len(cut)))
		b = append(b, cut...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// unmarshalWatermarks decodes a watermark record: the watermarks, oldest
// first, and the record's flags.
func unmarshalWatermarks(b []byte) ([]Watermark, byte, error) {
	body, err := checkFrame(b, watermarkMagic, "watermark record")
	if err != nil {
		return nil, 0, err
	}
	if len(body) < 1 || body[0]&^wmFlagsKnown != 0 {
		return nil, 0, fmt.Errorf("%w: bad watermark record flags", ErrCorruptRecord)
	}
	flags := body[0]
	d := &recDecoder{b: body[1:]}
	ws, err := d.watermarks()
	if err != nil {
		return nil, 0, err
	}
	return ws, flags, nil
}

func (d *recDecoder) watermarks() ([]Watermark, error) {
	n := d.uvarint("watermark count")
	if d.err != nil {
		return nil, d.err
	}
	if n == 0 || n > maxWatermarks {
		return nil, fmt.Errorf("%w: %d watermarks, want 1..%d", ErrCorruptRecord, n, maxWatermarks)
	}
	var ws []Watermark
	for range n {
		var w Watermark
		w.LowerNs = d.varint("lower")
		w.UpperNs = d.varint("upper")
		k := d.uvarint("cut length")
		if d.err != nil {
			return nil, d.err
		}
		if k > uint64(len(d.b)) {
			return nil, fmt.Errorf("%w: cut of %d bytes, %d left", ErrCorruptRecord, k, len(d.b))
		}
		if err := w.Cut.UnmarshalBinary(d.b[:k]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
		}
		d.b = d.b[k:]
		if w.UpperNs < w.LowerNs {
			return nil, fmt.Errorf("%w: upper %d below lower %d", ErrCorruptRecord, w.UpperNs, w.LowerNs)
		}
		ws = append(ws, w)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptRecord, len(d.b))
	}
	return ws, nil
}
