package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestReadLineValidJSON: every line `edge-agent read` prints is valid JSON
// (valid UTF-8 included), whatever bytes the payload holds; a payload that
// is not valid UTF-8 JSON is given in payload_b64, byte-exact.
func TestReadLineValidJSON(t *testing.T) {
	for _, payload := range [][]byte{
		[]byte(`{"alt":12.5}`),
		[]byte("{\"name\":\"\xff\xfe\"}"), // json.Valid accepts it, but it is not UTF-8
		{0xfd, 0x09, 0x00},
		nil,
	} {
		line := encodeLine(t, payload, localstream.Header{Key: "mqtt-topic", Value: "drones/d1/telemetry"})
		var got readLine
		if err := json.Unmarshal(line, &got); err != nil || !utf8.Valid(line) {
			t.Fatalf("payload %q: line %q is not valid JSON: %v", payload, line, err)
		}
		back := []byte(got.Payload)
		if got.PayloadB64 != "" {
			var err error
			if back, err = base64.StdEncoding.DecodeString(got.PayloadB64); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(back, payload) {
			t.Fatalf("payload %q came back as %q", payload, back)
		}
	}
}

// FuzzReadLine: any payload and header bytes make a valid JSON line.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "drones/d1/telemetry")
	f.Add([]byte("{\"a\":\"\xc3\"}"), "t\xff")
	f.Fuzz(func(t *testing.T, payload []byte, topic string) {
		line := encodeLine(t, payload, localstream.Header{Key: "mqtt-topic", Value: topic})
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Fatalf("invalid line %q", line)
		}
	})
}

func encodeLine(t testing.TB, payload []byte, h localstream.Header) []byte {
	t.Helper()
	it := centralread.Item{Kind: centralread.ItemEvent}
	it.Event.Record.RoutingKey = "d1"
	it.Event.Record.ContentType = "application/json"
	it.Event.Record.Headers = []localstream.Header{h}
	it.Event.Record.Payload = payload
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(toLine(it)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
