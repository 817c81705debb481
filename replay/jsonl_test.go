package replay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/broker"
)

func TestReadJSONL(t *testing.T) {
	in := `{"time":"2026-11-29T10:00:00Z","topic":"drones/d1/telemetry","payload":{"seq":1}}
not json
{"time":"2026-11-29T10:00:00.1Z","topic":"drones/d1/telemetry/mavlink","qos":0,"payload_b64":"/QkA"}
{"time":"2026-11-29T10:00:00.2Z","topic":"drones/+/telemetry","payload":{}}
{"topic":"drones/d1/telemetry","payload":{}}
{"time":"2026-11-29T10:00:00.3Z","payload":{}}
{"time":"2026-11-29T10:00:00.4Z","topic":"t","payload":{},"payload_b64":"AA=="}
{"time":"2026-11-29T10:00:00.5Z","topic":"t"}
{"time":"2026-11-29T10:00:00.6Z","topic":"t","qos":3,"payload":1}

{"time":"2026-11-29T10:00:01Z","topic":"drones/d2/telemetry","payload":"text"}
`
	recs, skipped, err := ReadJSONL(bytes.NewBufferString(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || skipped != 7 {
		t.Fatalf("%d records, %d skipped", len(recs), skipped)
	}
	if string(recs[0].Bytes()) != `{"seq":1}` || !bytes.Equal(recs[1].Bytes(), []byte{0xfd, 0x09, 0x00}) || *recs[1].QoS != 0 {
		t.Fatalf("payloads: %q %x", recs[0].Bytes(), recs[1].Bytes())
	}
}

// TestSendTelemetryRecording publishes the recorded session to a real
// broker and a plain subscriber receives every message, in order, with
// the same topic and bytes.
func TestSendTelemetryRecording(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "testdata", "telemetry.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	recs, skipped, err := ReadJSONL(f)
	f.Close()
	if err != nil || skipped != 0 || len(recs) != 122 {
		t.Fatalf("recording: %d records, %d skipped, %v", len(recs), skipped, err)
	}
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	var mu sync.Mutex
	var got []paho.Message
	all := make(chan struct{})
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(brk.URL()).SetClientID("jsonl-sub").SetOrderMatters(true))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer sub.Disconnect(100)
	tok := sub.Subscribe("drones/#", 1, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		if len(got) == len(recs) {
			close(all)
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	sum, err := SendTelemetry(ctx, recs, brk.URL(), TelemetryOptions{Speed: 8})
	if err != nil || sum.Published != len(recs) {
		t.Fatalf("sent %+v: %v", sum, err)
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("received %d of %d", len(got), len(recs))
	}
	mu.Lock()
	defer mu.Unlock()
	for i, m := range got {
		if m.Topic() != recs[i].Topic || !bytes.Equal(m.Payload(), recs[i].Bytes()) {
			t.Fatalf("message %d: %s %q, recorded %s %q", i, m.Topic(), m.Payload(), recs[i].Topic, recs[i].Bytes())
		}
	}
	if sum.Span < 3*time.Second || sum.Elapsed < sum.Span/8*9/10 {
		t.Fatalf("timing not kept: span %s sent in %s at speed 8", sum.Span, sum.Elapsed)
	}
}

func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-29T10:00:00Z","topic":"a/b","payload":{"x":1}}` + "\n"))
	f.Add([]byte(`{"time":"2026-11-29T10:00:00Z","topic":"a/b","payload_b64":"AAE="}`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _, _ := ReadJSONL(bytes.NewReader(b))
		for _, r := range recs {
			if !validRecord(r) {
				t.Fatalf("invalid record returned: %+v", r)
			}
		}
	})
}
