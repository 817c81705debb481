package wire

import (
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
)

func TestEventRoundTrip(t *testing.T) {
	rec := localstream.Record{
		Position: localstream.Position{Segment: localstream.NewSegmentID(1, 3), Offset: 42},
		Event: localstream.Event{
			RoutingKey: "drone.7", Writer: "video/drone.7", EventTime: 1_700_000_000_123_456_789, IngestTime: 1_700_000_000_200_000_000,
			Flags:       localstream.FlagKeyframe | localstream.FlagLate | localstream.FlagEstimatedTime,
			ContentType: "video/h264",
			Headers: []localstream.Header{
				{Key: "mqtt-topic", Value: "drones/7/telemetry"},
				{Key: "frame-pts", Value: "1,2,3"},
				{Key: "ssrc", Value: "1234"},
				{Key: "odd key=&", Value: "v&x=y"},
			},
			Payload: []byte{0, 0, 0, 1, 0x65},
		},
	}
	m := EncodeEvent("video", "agent-1", 9, rec)
	if m.Subject != "edge.video.agent-1.data.drone%2E7" {
		t.Fatalf("subject %q", m.Subject)
	}
	for k, v := range map[string]string{HdrSegment: "4294967299", HdrOffset: "42", HdrEventTime: "1700000000123456789",
		HdrWriter: "video/drone.7", HdrTxn: "9", HdrKeyframe: "1", HdrLate: "1", HdrEstimatedTime: "1",
		HdrContentType: "video/h264", HdrMqttTopic: "drones/7/telemetry", HdrFramePts: "1,2,3"} {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if m.Header.Get(HdrDiscontinuity) != "" {
		t.Errorf("unset flag has a header")
	}
	ev, err := DecodeEvent(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Agent != "agent-1" || ev.Stream != "video" || ev.Txn != 9 || !reflect.DeepEqual(ev.Record, rec) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", ev.Record, rec)
	}
}

// FuzzDecodeEvent: decoding arbitrary headers never panics, and what it
// accepts re-encodes to the same event.
func FuzzDecodeEvent(f *testing.F) {
	f.Add("edge.video.a.data.d", "1", "2", "3", "w", "4", "k=v&x", []byte("p"))
	f.Add("edge.video.a.cut", "x", "", "", "", "", "", []byte{})
	f.Add("edge.t.%2E.data.%", "18446744073709551615", "0", "-1", "", "0", "%zz", []byte{})
	f.Fuzz(func(t *testing.T, subj, seg, off, et, writer, txn, hdrs string, data []byte) {
		h := nats.Header{HdrSegment: {seg}, HdrOffset: {off}, HdrEventTime: {et}, HdrWriter: {writer}, HdrTxn: {txn}, HdrHeaders: {hdrs}}
		ev, err := DecodeEvent(subj, h, data)
		if err != nil {
			return
		}
		// One encode normalises the header order (mqtt-topic, frame-pts
		// first); from then on encode/decode is the identity.
		m := EncodeEvent(ev.Stream, ev.Agent, ev.Txn, ev.Record)
		ev2, err := DecodeEvent(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		m = EncodeEvent(ev2.Stream, ev2.Agent, ev2.Txn, ev2.Record)
		ev3, err := DecodeEvent(m.Subject, m.Header, m.Data)
		if err != nil || !reflect.DeepEqual(ev2.Record, ev3.Record) {
			t.Fatalf("re-encode: %v\n%+v\n%+v", err, ev2.Record, ev3.Record)
		}
	})
}

func FuzzDecodeCommitRecord(f *testing.F) {
	f.Add([]byte(`{"agent":"a","stream":"video","txn":1,"cut":{"0":3},"watermark":{"lower_ns":1,"upper_ns":2,"cut":{"0":3}}}`))
	f.Add([]byte(`{"agent":"a","stream":"Video","txn":1,"cut":{"x":3}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeCommitRecord(b)
		if err != nil {
			return
		}
		if _, err := r.StreamCut(); err != nil {
			t.Fatalf("accepted record with bad cut: %v", err)
		}
	})
}
