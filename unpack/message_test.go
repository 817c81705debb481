package unpack

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

func testEvent() sourced {
	return sourced{pos: position{seq: 7, index: 3}, ev: wire.CentralEvent{Stream: testStream, Agent: "gs.1", Txn: 9,
		Record: localstream.Record{Position: localstream.Position{Segment: 1<<32 | 2, Offset: 41}, Event: localstream.Event{RoutingKey: "drone 7/x",
			Writer: "telemetry/drone 7", EventTime: 1_700_000_000_000_000_001, IngestTime: 1_700_000_000_000_000_002,
			ContentType: "application/json", Flags: localstream.FlagLate | localstream.FlagKeyframe,
			Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/7/telemetry"}, {Key: "qos", Value: "1"}},
			Payload: []byte(`{"seq":1}`)}}}}
}

// TestDerivedMessageRoundTrip: a derived message decodes to the source
// event with its watermark and source position, on the drone's subject.
func TestDerivedMessageRoundTrip(t *testing.T) {
	s := testEvent()
	m, over := derivedMsg(Partition{Stream: testStream}, s, wire.WatermarkJSON{LowerNs: 5, UpperNs: 8}, limit{max: 1 << 20})
	if over {
		t.Fatal("a small event reported oversize")
	}
	if m.Subject != "edgeev.telemetry.gs%2E1.drone%207%2Fx" {
		t.Fatalf("subject %q", m.Subject)
	}
	ev, err := Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Agent != "gs.1" || ev.Txn != 9 || ev.Seq != 7 || ev.SourceIndex != 3 || ev.Watermark.LowerNs != 5 || ev.Watermark.UpperNs != 8 ||
		ev.Record.Position != s.ev.Record.Position || ev.Record.RoutingKey != s.ev.Record.RoutingKey || ev.Record.Flags != s.ev.Record.Flags ||
		string(ev.Record.Payload) != `{"seq":1}` || len(ev.Record.Headers) != 2 || ev.Record.IngestTime != s.ev.Record.IngestTime {
		t.Fatalf("decoded %+v", ev)
	}
}

// TestBuilderMatchesFresh: the builder's reused message is, event after
// event, the message derivedMsg builds fresh (no header of one event,
// nor the publisher's fence, stays behind in the next), for events with and without every flag,
// local header, hashed routing key, marker and oversize payload.
func TestBuilderMatchesFresh(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 7))
	b := newBuilder(Partition{Stream: testStream}, limit{max: 4000})
	for i := range 2000 {
		s := testEvent()
		r := &s.ev.Record
		s.pos = position{seq: uint64(1 + i/7), index: i % 7}
		r.Flags = localstream.Flags(rng.IntN(128))
		r.Offset = uint64(i)
		r.Headers = nil
		for _, k := range []string{"mqtt-topic", "frame-pts", "qos", "mqtt-topic", "a b"} {
			if rng.IntN(2) == 0 {
				r.Headers = append(r.Headers, localstream.Header{Key: k, Value: fmt.Sprint(k, i)})
			}
		}
		if rng.IntN(2) == 0 {
			r.ContentType = ""
		}
		switch rng.IntN(8) {
		case 0:
			r.RoutingKey = strings.Repeat("k", 300) // hashed token
		case 1:
			s.ev.Dropped = "gone"
		case 2:
			r.Payload = make([]byte, 5000) // oversize
		}
		wm := wire.WatermarkJSON{LowerNs: int64(i / 5), UpperNs: int64(i/5 + 1)}
		want, wantOver := derivedMsg(Partition{Stream: testStream}, s, wm, limit{max: 4000})
		got, gotOver := b.event(&s, wm)
		if got.Subject != want.Subject || string(got.Data) != string(want.Data) || gotOver != wantOver || !maps.EqualFunc(got.Header, want.Header, slices.Equal) {
			t.Fatalf("event %d: builder\n%s %v %v\nfresh\n%s %v %v", i, got.Subject, got.Header, gotOver, want.Subject, want.Header, wantOver)
		}
		// The publisher adds its fence, and the message is reused two
		// events on.
		putHeader(got.Header, jetstream.ExpectedLastSeqHeader, "123456789")
	}
}

// TestOversizeEventBecomesMarker: an event that does not fit the max
// payload with its headers is republished as a marker with the reason,
// and the marker fits.
func TestOversizeEventBecomesMarker(t *testing.T) {
	s := testEvent()
	s.ev.Record.Payload = make([]byte, 2000)
	m, over := derivedMsg(Partition{Stream: testStream}, s, wire.WatermarkJSON{}, limit{max: 1500})
	if !over || msgSize(m) > 1500 {
		t.Fatalf("oversize %v, %d bytes", over, msgSize(m))
	}
	ev, err := Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ev.Dropped, "over the max payload 1500") || len(ev.Record.Payload) != 0 || ev.Record.Offset != 41 {
		t.Fatalf("marker %+v", ev)
	}
}

// TestDecodeRejects: messages that are not derived ones are errors.
func TestDecodeRejects(t *testing.T) {
	good, _ := derivedMsg(Partition{Stream: testStream}, testEvent(), wire.WatermarkJSON{}, limit{})
	for name, c := range map[string]struct {
		subj string
		h    func(nats.Header)
	}{
		"source subject": {subj: "edge.telemetry.a.data.b"},
		"no source seq":  {h: func(h nats.Header) { h.Del(HdrSourceSeq) }},
		"bad index":      {h: func(h nats.Header) { h.Set(HdrSourceIndex, "-1") }},
		"no watermark":   {h: func(h nats.Header) { h.Del(HdrWatermarkLower) }},
		"bad offset":     {h: func(h nats.Header) { h.Set(wire.HdrOffset, "x") }},
	} {
		h := nats.Header{}
		for k, v := range good.Header {
			h[k] = append([]string(nil), v...)
		}
		subj := good.Subject
		if c.subj != "" {
			subj = c.subj
		}
		if c.h != nil {
			c.h(h)
		}
		if _, err := Decode(subj, h, good.Data); err == nil {
			t.Errorf("%s: decoded", name)
		} else if !errors.Is(err, wire.ErrCorruptRecord) && !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDecode: Decode of any subject, header block and payload returns
// an event or an error, never a panic.
func FuzzDecode(f *testing.F) {
	m, _ := derivedMsg(Partition{Stream: testStream}, testEvent(), wire.WatermarkJSON{LowerNs: 1, UpperNs: 2}, limit{})
	var hb strings.Builder
	hb.WriteString("NATS/1.0\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			hb.WriteString(k + ": " + v + "\r\n")
		}
	}
	hb.WriteString("\r\n")
	f.Add(m.Subject, []byte(hb.String()), m.Data)
	f.Add("edgeev.a.b.c", []byte("NATS/1.0\r\nEdge-Source-Seq: 1\r\n\r\n"), []byte{})
	f.Add("edgeev.a.p1.b.c", []byte("NATS/1.0\r\nEdge-Source-Seq: 1\r\n\r\n"), []byte{})
	f.Fuzz(func(t *testing.T, subj string, hdr, data []byte) {
		h, err := parseHeaders(hdr)
		if err != nil {
			return
		}
		Decode(subj, h, data)
	})
}

// TestOptionsValidate: each bad option is refused with its field named.
func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Replicas: 7}, "replicas"},
		{Options{MaxPendingBytes: -1}, "max pending bytes"},
		{Options{MaxPending: 5000}, "max pending"},
		{Options{StandbyCheck: -1}, "negative"},
	} {
		if _, err := New(&nats.Conn{}, testStream, c.o); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := New(&nats.Conn{}, testStream, Options{}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
