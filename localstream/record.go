package localstream

import (
	"encoding/binary"
	"fmt"
)

// recordVersion is the version byte of the stored record layout (see
// doc.go); recordVersionRef is the same layout with a payload file
// reference instead of the payload.
const (
	recordVersion    = 1
	recordVersionRef = 2
)

// recordFixed is the size of the fixed part: version, flags, event time, ingest time.
const recordFixed = 1 + 2 + 8 + 8

// encodedSize returns the exact size of the encoded record.
func encodedSize(ev *Event) int {
	n := recordFixed + uvarintLen(len(ev.RoutingKey)) + len(ev.RoutingKey) +
		uvarintLen(len(ev.Writer)) + len(ev.Writer) +
		uvarintLen(len(ev.ContentType)) + len(ev.ContentType) +
		uvarintLen(len(ev.Headers)) + uvarintLen(len(ev.Payload)) + len(ev.Payload)
	for _, h := range ev.Headers {
		n += uvarintLen(len(h.Key)) + len(h.Key) + uvarintLen(len(h.Value)) + len(h.Value)
	}
	return n
}

func uvarintLen(n int) int {
	l := 1
	for x := uint64(n); x >= 0x80; x >>= 7 {
		l++
	}
	return l
}

// appendRecord appends the encoded event to b.
func appendRecord(b []byte, ev *Event) []byte {
	b = appendRecordHead(b, recordVersion, ev)
	b = binary.AppendUvarint(b, uint64(len(ev.Payload)))
	return append(b, ev.Payload...)
}

// appendRecordHead appends everything but the payload field.
func appendRecordHead(b []byte, version byte, ev *Event) []byte {
	b = append(b, version)
	b = binary.BigEndian.AppendUint16(b, uint16(ev.Flags))
	b = binary.BigEndian.AppendUint64(b, uint64(ev.EventTime))
	b = binary.BigEndian.AppendUint64(b, uint64(ev.IngestTime))
	b = appendBytes(b, ev.RoutingKey)
	b = appendBytes(b, ev.Writer)
	b = appendBytes(b, ev.ContentType)
	b = binary.AppendUvarint(b, uint64(len(ev.Headers)))
	for _, h := range ev.Headers {
		b = appendBytes(b, h.Key)
		b = appendBytes(b, h.Value)
	}
	return b
}

func appendBytes[S string | []byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeRecord decodes a stored record of version 1. The payload is
// copied, so the result does not alias b.
func decodeRecord(b []byte) (Event, error) {
	ev, ref, err := decodeRecordRef(b)
	if err == nil && ref != nil {
		return Event{}, fmt.Errorf("%w: a payload file reference where the payload was expected", ErrCorruptRecord)
	}
	return ev, err
}

// decodeRecordRef decodes a stored record of version 1 (payload inline)
// or 2 (payload in a payload file: ref, and no Payload).
func decodeRecordRef(b []byte) (Event, *payloadRef, error) { return decodeRecordIn(b, nil) }

// decodeRecordIn is decodeRecordRef taking the strings, the header slice
// and the payload copy from a (nil: fresh allocations). The result does
// not alias b either way.
func decodeRecordIn(b []byte, a *readArena) (Event, *payloadRef, error) {
	var ev Event
	if len(b) < 1 {
		return ev, nil, fmt.Errorf("%w: empty", ErrCorruptRecord)
	}
	if b[0] != recordVersion && b[0] != recordVersionRef {
		return ev, nil, fmt.Errorf("%w: %d, want %d or %d", ErrUnsupportedVersion, b[0], recordVersion, recordVersionRef)
	}
	if len(b) < recordFixed {
		return ev, nil, fmt.Errorf("%w: %d bytes < %d fixed", ErrCorruptRecord, len(b), recordFixed)
	}
	ev.Flags = Flags(binary.BigEndian.Uint16(b[1:]))
	ev.EventTime = int64(binary.BigEndian.Uint64(b[3:]))
	ev.IngestTime = int64(binary.BigEndian.Uint64(b[11:]))
	d := decoder{b: b[recordFixed:]}
	ev.RoutingKey = a.str(d.bytes("routing key"))
	ev.Writer = a.str(d.bytes("writer"))
	ev.ContentType = a.str(d.bytes("content type"))
	n := d.uvarint("header count")
	if d.err == nil && n > uint64(len(d.b)/2) {
		d.err = fmt.Errorf("%w: %d headers in %d bytes", ErrCorruptRecord, n, len(d.b))
	}
	if d.err == nil && n > 0 {
		ev.Headers = a.headers(int(n))
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.bytes("header key")
		v := d.bytes("header value")
		ev.Headers = append(ev.Headers, Header{Key: a.str(k), Value: a.str(v)})
	}
	var ref *payloadRef
	if b[0] == recordVersionRef {
		ref = &payloadRef{File: d.uvarint("payload file"), Offset: d.uvarint("payload offset"), Length: d.uvarint("payload length")}
		if d.err == nil && len(d.b) < 4 {
			d.err = fmt.Errorf("%w: payload checksum of %d bytes", ErrCorruptRecord, len(d.b))
		}
		if d.err == nil {
			ref.CRC, d.b = binary.BigEndian.Uint32(d.b), d.b[4:]
		}
	} else {
		ev.Payload = d.bytes("payload")
	}
	if d.err != nil {
		return Event{}, nil, d.err
	}
	if len(d.b) != 0 {
		return Event{}, nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptRecord, len(d.b))
	}
	if ref == nil {
		ev.Payload = a.copy(ev.Payload)
	}
	return ev, ref, nil
}

// decoder reads length-prefixed fields; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.err = fmt.Errorf("%w: bad %s length", ErrCorruptRecord, what)
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s of %d bytes, %d left", ErrCorruptRecord, what, n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
