package watermark

import (
	"bytes"
	"errors"
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
	for i, w := range sampleWatermarks() {
		b, err := marshalWatermark(w)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unmarshalWatermark(b)
		if err != nil || !got.Equal(w) {
			t.Fatalf("%d: %s, %v; want %s", i, got, err, w)
		}
		for j := range b {
			c := bytes.Clone(b)
			c[j] ^= 0x01
			if _, err := unmarshalWatermark(c); err == nil {
				t.Fatalf("%d: bit flip at byte %d not detected", i, j)
			}
		}
	}
}

func TestCutMapRoundTrip(t *testing.T) {
	w := sampleWatermarks()[0]
	m := CutMap(w.Cut)
	if m["4294967298"] != 0 || m["0"] != 3 || len(m) != 2 {
		t.Fatalf("CutMap = %v", m)
	}
	c, err := CutFromMap("video", m)
	if err != nil || !c.Equal(w.Cut) {
		t.Fatalf("CutFromMap = %s, %v", c, err)
	}
	for _, bad := range []map[string]uint64{{}, {"01": 1}, {"x": 1}, {"-1": 2}} {
		if _, err := CutFromMap("video", bad); err == nil {
			t.Fatalf("CutFromMap(%v) accepted", bad)
		}
	}
}

// FuzzWriterRecord: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to the same bytes (the form is canonical).
func FuzzWriterRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(r.marshal())
	}
	f.Add([]byte("W\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unmarshalWriterRecord(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.marshal(), b) {
			t.Fatalf("decoded %+v re-encodes differently", r)
		}
	})
}

// FuzzWatermarkRecord: decoding arbitrary bytes never panics, and whatever
// decodes survives a re-encode unchanged.
func FuzzWatermarkRecord(f *testing.F) {
	for _, w := range sampleWatermarks() {
		b, _ := marshalWatermark(w)
		f.Add(b)
	}
	f.Add([]byte("M\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := unmarshalWatermark(b)
		if err != nil {
			return
		}
		b2, err := marshalWatermark(w)
		if err != nil {
			t.Fatal(err)
		}
		w2, err := unmarshalWatermark(b2)
		if err != nil || !w2.Equal(w) {
			t.Fatalf("re-encode of %s: %s, %v", w, w2, err)
		}
	})
}
