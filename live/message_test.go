package live

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestMessageRoundTrip: a value comes back from its live message as it
// went, odd drone ids (escaped, hashed) included, and wireSize is what
// the message costs on the link.
func TestMessageRoundTrip(t *testing.T) {
	long := string(bytes.Repeat([]byte("drone.with/odd chars "), 10))
	for _, drone := range []string{"d1", "fleet.a/7", " lead", long, "%x"} {
		v := value{drone: drone, writer: "telemetry/" + drone, contentType: "application/json", segment: 4294967297,
			offset: 42, eventNs: 1_796_000_000_000_000_000, ingestNs: 1_796_000_000_100_000_000, keyframe: true, payload: []byte(`{"a":1}`)}
		m := v.message("agent.1", "telemetry", time.Unix(0, 1_796_000_001_000_000_000), time.Hour)
		got, err := decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("%q: %v", drone, err)
		}
		if got.Agent != "agent.1" || got.Stream != "telemetry" || got.Drone != drone || got.Writer != v.writer ||
			got.Segment != v.segment || got.Offset != v.offset || got.EventTimeNs != v.eventNs || got.IngestTimeNs != v.ingestNs ||
			got.SentTimeNs != 1_796_000_001_000_000_000 || !got.Keyframe || got.ContentType != v.contentType || !bytes.Equal(got.Payload, v.payload) {
			t.Errorf("%q: came back as %+v", drone, got)
		}
		if m.Header.Get(hdrTTL) != "3600s" {
			t.Errorf("TTL header %q", m.Header.Get(hdrTTL))
		}
		hdr := "NATS/1.0\r\n"
		for k, vs := range m.Header {
			for _, x := range vs {
				hdr += k + ": " + x + "\r\n"
			}
		}
		hdr += "\r\n"
		if want := len("HPUB "+m.Subject+" ") + len(strconv.Itoa(len(hdr))) + 1 + len(strconv.Itoa(len(hdr)+len(m.Data))) + 2 + len(hdr) + len(m.Data) + 2; wireSize(m) != want {
			t.Errorf("%q: wireSize %d, want %d", drone, wireSize(m), want)
		}
	}
}

// FuzzDecode: whatever a live message holds, decode returns a value or
// an error, never panics, and a value it returns re-encodes to the same
// subject.
func FuzzDecode(f *testing.F) {
	v := value{drone: "d1", writer: "telemetry/d1", payload: []byte("x")}
	m := v.message("a1", "telemetry", time.Unix(1, 0), time.Hour)
	f.Add(m.Subject, m.Header.Get(hdrRoutingKey), m.Header.Get(hdrSegment), m.Header.Get(hdrEventTime), m.Header.Get(hdrWriter), []byte("x"))
	f.Add("edgelive.a.b", "%", "-1", "x", "%%", []byte{})
	f.Fuzz(func(t *testing.T, subject, drone, seg, evt, writer string, data []byte) {
		h := nats.Header{}
		h.Set(hdrRoutingKey, drone)
		h.Set(hdrSegment, seg)
		h.Set(hdrOffset, "0")
		h.Set(hdrEventTime, evt)
		h.Set(hdrIngestTime, "0")
		h.Set(hdrSentTime, "0")
		h.Set(hdrWriter, writer)
		got, err := decode(subject, h, data)
		if err != nil {
			return
		}
		if s := Subject(got.Agent, got.Stream, got.Drone); s != subject {
			t.Fatalf("decoded %+v from %q, which re-encodes to %q", got, subject, s)
		}
	})
}
