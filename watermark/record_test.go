package watermark

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
)

func sampleRecords() []writerRecord {
	id := localstream.NewSegmentID
	return []writerRecord{
		{},
		{hasMark: true, noted: 1_700_000_000_000_000_000, maxSeen: 1_700_000_000_000_000_050, lastActive: 1_700_000_000_000_000_099,
			floor: 1_699_999_999_000_000_000, pos: []localstream.Position{{Segment: id(0, 0), Offset: 17}}},
		{closed: true, hasMark: true, noted: -5, maxSeen: 3, pos: []localstream.Position{{Segment: id(2, 4), Offset: 0}, {Segment: id(3, 9), Offset: 1 << 40}},
			base: &mark{t: -7, pos: []localstream.Position{{Segment: id(1, 1), Offset: 2}}}},
	}
}

func TestWriterRecordRoundTrip(t *testing.T) {
	for i, r := range sampleRecords() {
		b := r.marshal()
		got, err := unmarshalWriterRecord(b)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !bytes.Equal(got.marshal(), b) {
			t.Fatalf("%d: round trip differs: %+v vs %+v", i, got, r)
		}
		// Every flipped bit and every truncation is caught.
		for j := range b {
			c := bytes.Clone(b)
			c[j] ^= 0x10
			if _, err := unmarshalWriterRecord(c); err == nil {
				t.Fatalf("%d: bit flip at byte %d not detected", i, j)
			}
			if _, err := unmarshalWriterRecord(b[:j]); err == nil {
				t.Fatalf("%d: truncation at %d not detected", i, j)
			}
		}
	}
	b := sampleRecords()[1].marshal()
	b[1] = 2
	if _, err := unmarshalWriterRecord(b); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("version 2: %v, want ErrUnsupportedVersion", err)
	}
}

func sampleWatermarks() []Watermark {
	id := localstream.NewSegmentID
	return []Watermark{
		{LowerNs: 100, UpperNs: 250, Cut: localstream.StreamCut{Stream: "video", Positions: map[localstream.SegmentID]uint64{id(0, 0): 3, id(1, 2): 0}}},
		{LowerNs: -1, UpperNs: -1, Cut: localstream.StreamCut{Stream: "telemetry", Positions: map[localstream.SegmentID]uint64{id(0, 0): 1 << 50}}},
	}
}

func TestWatermarkRecordRoundTrip(t *testing.T) {
	ws := sampleWatermarks()
	for i, set := range [][]Watermark{ws[:1], ws} {
		b, err := marshalWatermarks(set, byte(i))
		if err != nil {
			t.Fatal(err)
		}
		got, flags, err := unmarshalWatermarks(b)
		if err != nil || len(got) != len(set) || flags != byte(i) {
			t.Fatalf("%d: %v, %v; want %v", i, got, err, set)
		}
		for k := range set {
			if !got[k].Equal(set[k]) {
				t.Fatalf("%d: %s, want %s", i, got[k], set[k])
			}
		}
		for j := range b {
			c := bytes.Clone(b)
			c[j] ^= 0x01
			if _, _, err := unmarshalWatermarks(c); err == nil {
				t.Fatalf("%d: bit flip at byte %d not detected", i, j)
			}
		}
	}
	b, err := marshalWatermarks(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := unmarshalWatermarks(b); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("empty watermark record: %v", err)
	}
}

// withChecksum appends the record checksum to body.
func withChecksum(body []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.ChecksumIEEE(body))
}

// FuzzWriterRecord: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to the same bytes (the form is canonical).
func FuzzWriterRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		b := r.marshal()
		f.Add(b)
		f.Add(b[:len(b)-4])
	}
	f.Add([]byte("W\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		// As given, and with a valid checksum so the decoder proper runs.
		for _, in := range [][]byte{b, withChecksum(b)} {
			r, err := unmarshalWriterRecord(in)
			if err != nil {
				continue
			}
			if !bytes.Equal(r.marshal(), in) {
				t.Fatalf("decoded %+v re-encodes differently", r)
			}
		}
	})
}

// FuzzWatermarkRecord: decoding arbitrary bytes never panics, and whatever
// decodes survives a re-encode unchanged.
func FuzzWatermarkRecord(f *testing.F) {
	ws := sampleWatermarks()
	for _, set := range [][]Watermark{ws[:1], ws} {
		b, _ := marshalWatermarks(set, wmFlagPruned)
		f.Add(b)
		f.Add(b[:len(b)-4])
	}
	f.Add([]byte("M\x01\x00\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ws, flags, err := unmarshalWatermarks(withChecksum(b))
		if err != nil {
			if ws, flags, err = unmarshalWatermarks(b); err != nil {
				return
			}
		}
		b2, err := marshalWatermarks(ws, flags)
		if err != nil {
			t.Fatal(err)
		}
		ws2, flags2, err := unmarshalWatermarks(b2)
		if err != nil || len(ws2) != len(ws) || flags2 != flags {
			t.Fatalf("re-encode of %v: %v, %v", ws, ws2, err)
		}
		for i := range ws {
			if !ws2[i].Equal(ws[i]) {
				t.Fatalf("re-encode of %s: %s", ws[i], ws2[i])
			}
		}
	})
}
