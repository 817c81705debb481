package telemetry

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
)

// FuzzBuildEvent: any payload becomes an event without panicking; the
// payload is kept byte for byte; non-JSON is flagged raw, JSON (as
// json.Valid says: maybeJSON's shortcut must not turn it raw) is not; an
// estimated event time is the receive time; every event has a positive
// time.
func FuzzBuildEvent(f *testing.F) {
	f.Add([]byte(`{"seq":1,"timestamp":1764428400123}`))
	f.Add([]byte(`{"seq":2,"timestamp":17`))
	f.Add([]byte(`{"timestamp":"2026-11-29T12:00:00Z"}`))
	f.Add([]byte{0xFD, 0x09, 0x00})
	f.Add([]byte(`offline`))
	f.Add([]byte(" \t\r\n-1.5e3"))
	f.Add([]byte(`"online"`))
	f.Add([]byte(`null`))
	in, err := New(testConfig("tcp://127.0.0.1:1", "fuzz"), Sink{Stream: nilAppender{}, Meta: nilMeta{}})
	if err != nil {
		f.Fatal(err)
	}
	const recv = int64(1_700_000_000_000_000_000)
	f.Fuzz(func(t *testing.T, payload []byte) {
		ev := in.buildEvent(newLane("d", recv), "drones/d/telemetry", payload, recv)
		if !bytes.Equal(ev.Payload, payload) || ev.RoutingKey != "d" || ev.Writer != "telemetry/d" {
			t.Fatal("event does not carry the message")
		}
		if ev.Flags.Has(localstream.FlagEstimatedTime) && ev.EventTime != recv {
			t.Fatalf("estimated flag %v with time %d", ev.Flags.Has(localstream.FlagEstimatedTime), ev.EventTime)
		}
		if ev.Flags.Has(localstream.FlagRaw) == (ev.ContentType == ContentTypeJSON) {
			t.Fatalf("raw flag %v with content type %s", ev.Flags.Has(localstream.FlagRaw), ev.ContentType)
		}
		if json.Valid(payload) != (ev.ContentType == ContentTypeJSON) {
			t.Fatalf("json.Valid %v, content type %s", json.Valid(payload), ev.ContentType)
		}
		if ev.EventTime <= 0 {
			t.Fatalf("event time %d", ev.EventTime)
		}
		parseStatus(payload)
	})
}
