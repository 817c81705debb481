package localstream

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	ev := Event{RoutingKey: "drone-7", Writer: "video/drone-7", EventTime: 1_700_000_000_123_456_789, IngestTime: -5,
		Flags: FlagKeyframe | FlagLate, ContentType: "video/h264",
		Headers: []Header{{"frame-pts", "1,2,3"}, {"ssrc", "1234"}}, Payload: bytes.Repeat([]byte{0, 0, 1}, 100)}
	b := appendRecord(nil, &ev)
	if len(b) != encodedSize(&ev) {
		t.Fatalf("encodedSize %d, encoded %d", encodedSize(&ev), len(b))
	}
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ev) {
		t.Fatalf("got %+v\nwant %+v", got, ev)
	}
	if _, err := decodeRecord(append([]byte{3}, b[1:]...)); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("version 3: %v", err)
	}
	// Version 2: the payload in a payload file, a reference in the record.
	ref := payloadRef{File: 7, Offset: 1 << 33, Length: 300, CRC: 0xdeadbeef}
	b2 := appendPayloadRef(appendRecordHead(nil, recordVersionRef, &ev), ref)
	got2, gotRef, err := decodeRecordRef(b2)
	if err != nil || gotRef == nil || *gotRef != ref || got2.Payload != nil || got2.RoutingKey != ev.RoutingKey || len(got2.Headers) != 2 {
		t.Fatalf("version 2: %+v %+v %v", got2, gotRef, err)
	}
	if _, err := decodeRecord(b2); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("version 2 where an inline payload is expected: %v", err)
	}
	for n := range len(b2) {
		if _, _, err := decodeRecordRef(b2[:n]); err == nil {
			t.Fatalf("version 2 truncated to %d decoded", n)
		}
	}
	for n := range len(b) {
		if _, err := decodeRecord(b[:n]); err == nil {
			t.Fatalf("truncated to %d decoded", n)
		}
	}
	if _, err := decodeRecord(append(b, 0)); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	ev := Event{RoutingKey: "d", Writer: "w", Headers: []Header{{"k", "v"}}, Payload: []byte("x")}
	f.Add(appendRecord(nil, &ev))
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(appendPayloadRef(appendRecordHead(nil, recordVersionRef, &ev), payloadRef{File: 1, Offset: 2, Length: 3, CRC: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, ref, err := decodeRecordRef(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		var again Event
		var againRef *payloadRef
		if ref != nil {
			again, againRef, err = decodeRecordRef(appendPayloadRef(appendRecordHead(nil, recordVersionRef, &ev), *ref))
		} else {
			again, err = decodeRecord(appendRecord(nil, &ev))
		}
		if err != nil || !reflect.DeepEqual(again, ev) || (ref != nil && *againRef != *ref) {
			t.Fatalf("re-encode/decode differs: %v", err)
		}
		// A reader's arena decodes the same event, twice in a row.
		var a readArena
		for range 2 {
			inArena, inRef, err := decodeRecordIn(b, &a)
			if err != nil || !reflect.DeepEqual(inArena, ev) || (ref != nil && *inRef != *ref) {
				t.Fatalf("arena decode differs: %v", err)
			}
		}
	})
}
