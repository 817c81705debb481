package flight

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/foxglove/mcap/go/mcap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// smallRecord writes a record of a few made-up events through the
// exporter's own writing path (no centre): a MAVLink frame, a JSON
// telemetry message with a position, an H.265 chunk of two frames and a
// marker. It returns the file and the signing key's public half.
func smallRecord(tb testing.TB) ([]byte, ed25519.PublicKey) {
	return madeUpRecord(tb, false)
}

// tinyRecord is smallRecord with only its MAVLink frame and its marker:
// two channels and their entries, a fifth of the bytes (FuzzVerify's
// seed: the fuzzer's work on an input grows with its size).
func tinyRecord(tb testing.TB) ([]byte, ed25519.PublicKey) {
	return madeUpRecord(tb, true)
}

func madeUpRecord(tb testing.TB, tiny bool) ([]byte, ed25519.PublicKey) {
	tb.Helper()
	pub, key, _ := ed25519.GenerateKey(bytes.NewReader(make([]byte, 64)))
	var buf bytes.Buffer
	rw, err := newRecordWriter(&buf, mcap.CompressionLevelFastest)
	if err != nil {
		tb.Fatal(err)
	}
	f := Flight{Drone: "d1", Agent: "gs-1", N: 1, StartNs: 1, EndNs: 1e18, Rule: "range"}
	x := &exporter{f: f, o: ExportOptions{FindOptions: FindOptions{Streams: DefaultStreams()}}, rw: rw, keys: map[[2]string]*KeyReport{}}
	tel, vid := &streamRead{name: "telemetry"}, &streamRead{name: "video"}
	frame, err := mavlink.DefaultDialect().Encode(false, 7, 1, 1, heartbeat())
	if err != nil {
		tb.Fatal(err)
	}
	chunk := video.Chunk{Codec: video.CodecH265, SSRC: 1, Payload: []byte{0, 0, 0, 1, 0x40, 1, 0xAA, 0, 0, 0, 1, 0x26, 1, 0xBB},
		Frames: []video.FrameInfo{{PTS: 100, Size: 7, Key: true}, {PTS: 133, Size: 7}}}
	items := []struct {
		s  *streamRead
		it centralread.Item
	}{
		{tel, item(1, localstream.Event{RoutingKey: "d1", EventTime: 10, IngestTime: 11, ContentType: mavlink.ContentType,
			Headers: []localstream.Header{{Key: mavlink.HeaderMsgID, Value: "0"}}, Payload: frame}, "")},
		{tel, item(2, localstream.Event{RoutingKey: "d1", EventTime: 20, IngestTime: 21, ContentType: "application/json",
			Payload: []byte(`{"lat":47.1,"lon":8.5,"alt":500}`)}, "")},
		{vid, item(3, chunk.Event("d1", 31), "")},
		{tel, item(4, localstream.Event{RoutingKey: "d1", EventTime: 40, IngestTime: 41}, "too large")},
	}
	if tiny {
		items = append(items[:1], items[3])
	}
	for _, i := range items {
		if err := x.event(i.s, &i.it); err != nil {
			tb.Fatal(err)
		}
	}
	c := x.certificate(50)
	if err := c.sign(key); err != nil {
		tb.Fatal(err)
	}
	cb, _ := json.Marshal(c)
	if err := rw.close(map[string]string{"drone": "d1"}, cb, 50); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes(), pub
}

func item(seq uint64, ev localstream.Event, dropped string) centralread.Item {
	return centralread.Item{Kind: centralread.ItemEvent, Seq: seq, Agent: "gs-1", Event: wire.CentralEvent{Seq: seq, Stream: "x", Agent: "gs-1", Txn: 1,
		Record: localstream.Record{Position: localstream.Position{Offset: seq}, Event: ev}, Dropped: dropped}}
}

// TestSmallRecord: each kind of event lands on its channel (H.265 as
// CompressedVideo with format h265, one message per frame; a marker on
// /flight/gaps; a JSON position as LocationFix), and the record verifies.
func TestSmallRecord(t *testing.T) {
	rec, pub := smallRecord(t)
	rep, err := Verify(bytes.NewReader(rec), VerifyOptions{Trusted: []ed25519.PublicKey{pub}})
	if err != nil || rep.Err() != nil {
		t.Fatalf("verify: %v %v", err, rep.Err())
	}
	counts := map[string]int{}
	for _, c := range rep.Certificate.Channels {
		counts[c.Topic] = c.Messages
	}
	want := map[string]int{"/mavlink/d1": 1, "/telemetry/d1": 1, "/position/d1": 1, "/video/d1": 2, TopicGaps: 1, TopicEvents: 4}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d messages, want %d (all %v)", k, counts[k], v, counts)
		}
	}
	if len(rep.Certificate.Gaps) != 1 || rep.Certificate.Gaps[0].Reason != "too large" {
		t.Errorf("gaps %+v", rep.Certificate.Gaps)
	}
	r, _ := mcap.NewReader(bytes.NewReader(rec))
	it, _ := r.Messages(mcap.UsingIndex(false), mcap.WithTopics([]string{"/video/d1"}))
	_, _, m, err := it.NextInto(nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeVideo(m.Data)
	if err != nil || v.Format != "h265" || v.Nsec != 100 || len(v.Data) != 7 || m.PublishTime != 100 || m.LogTime != 31 {
		t.Fatalf("first H.265 access unit %+v (log %d publish %d): %v", v, m.LogTime, m.PublishTime, err)
	}
}

func heartbeat() *ardupilotmega.MessageHeartbeat {
	return &ardupilotmega.MessageHeartbeat{Type: ardupilotmega.MAV_TYPE_QUADROTOR, Autopilot: ardupilotmega.MAV_AUTOPILOT_ARDUPILOTMEGA, BaseMode: 217, MavlinkVersion: 3}
}

// TestVideoProtobuf: the hand-written encoding is protobuf's, by the
// schema the record carries: protobuf-go's own decoder (dynamicpb, from
// the FileDescriptorSet) reads it, and its encoder writes the same bytes.
func TestVideoProtobuf(t *testing.T) {
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(CompressedVideoSchema(), set); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatal(err)
	}
	d, err := files.FindDescriptorByName("foxglove.CompressedVideo")
	if err != nil {
		t.Fatal(err)
	}
	md := d.(protoreflect.MessageDescriptor)
	for _, pts := range []int64{0, 1, 1_796_614_874_998_039_622, 999_999_999, 5_000_000_000} {
		data := []byte{0, 0, 0, 1, 0x67, 0xff}
		got := appendVideo(nil, pts, "drone-1.a_b", data, "h264")
		m := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(got, m); err != nil {
			t.Fatal(err)
		}
		ts := m.Get(md.Fields().ByName("timestamp")).Message()
		sec, nsec := ts.Get(ts.Descriptor().Fields().ByName("seconds")).Int(), ts.Get(ts.Descriptor().Fields().ByName("nanos")).Int()
		if sec*1e9+nsec != pts || m.Get(md.Fields().ByName("frame_id")).String() != "drone-1.a_b" ||
			!bytes.Equal(m.Get(md.Fields().ByName("data")).Bytes(), data) || m.Get(md.Fields().ByName("format")).String() != "h264" {
			t.Fatalf("pts %d: protobuf-go reads %v", pts, m)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("pts %d: %x\nwant %x (%v)", pts, got, want, err)
		}
		v, err := decodeVideo(got)
		if err != nil || v.Sec*1e9+int64(v.Nsec) != pts || v.FrameID != "drone-1.a_b" || !bytes.Equal(v.Data, data) || v.Format != "h264" {
			t.Fatalf("pts %d: decodeVideo %+v %v", pts, v, err)
		}
	}
}
