package wire

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
)

// harnessRecords returns n records shaped like the peers harness's: 8
// drones in one segment, consecutive offsets, 1 ms apart, each with its
// MQTT topic header; payloads of 200 bytes ("seq=%012d|" and random
// bytes, as the harness sends them) or ~185 bytes of drone-like JSON.
func harnessRecords(n int, payload string) []localstream.Record {
	rng := rand.New(rand.NewPCG(3, 4))
	out := make([]localstream.Record, n)
	for i := range out {
		d := fmt.Sprintf("drone-%d", i%8)
		r := localstream.Record{Position: localstream.Position{Offset: uint64(i)}, Event: localstream.Event{
			RoutingKey: d, Writer: "telemetry/" + d,
			EventTime:  1_767_000_000_000_000_000 + int64(i)*1_000_000 + rng.Int64N(50_000),
			IngestTime: 1_767_000_000_000_000_000 + int64(i)*1_000_000 + rng.Int64N(50_000),
			Headers:    []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}},
		}}
		switch payload {
		case "random":
			r.ContentType = "application/octet-stream"
			r.Payload = make([]byte, 200)
			copy(r.Payload, fmt.Sprintf("seq=%012d|", i))
			for j := 17; j < len(r.Payload); j++ {
				r.Payload[j] = byte(rng.Uint32())
			}
		case "json":
			r.ContentType = "application/json"
			r.Payload = fmt.Appendf(nil, `{"drone":%q,"seq":%d,"ts":%d,"lat":47.%06d,"lon":8.%06d,"alt":%.1f,"speed":%.2f,"heading":%d,"battery":%d,"mode":"auto"}`,
				d, i, r.EventTime/1e6, rng.IntN(1e6), rng.IntN(1e6), rng.Float64()*500, rng.Float64()*20, rng.IntN(360), 20+rng.IntN(80))
		}
		out[i] = r
	}
	return out
}

// BenchmarkPackEncode packs one transaction of 1,000 harness-shaped events
// and encodes it with its commit record (packTxn.Commit's CPU without the
// publish). ns/op and allocs/op are per transaction; wire_B/event is what
// goes on the uplink per event, to be weighed against any saving.
func BenchmarkPackEncode(b *testing.B) {
	for _, payload := range []string{"random", "json"} {
		b.Run(payload, func(b *testing.B) {
			recs := harnessRecords(1000, payload)
			c := testCommit()
			var n int
			b.ReportAllocs()
			for b.Loop() {
				w := NewPackWriter()
				for i := range recs {
					w.Add(&recs[i])
				}
				n = len(w.Encode(c, c.Txn, nil))
			}
			b.ReportMetric(float64(n)/float64(len(recs)), "wire_B/event")
		})
	}
}

// BenchmarkPackDecode decodes one pack of 1,000 harness-shaped events
// ("random", "json") or of four 256 KiB video chunks ("video"), as a
// reader or the unpack service does; ns/op is per pack, MB/s of payload.
func BenchmarkPackDecode(b *testing.B) {
	for _, payload := range []string{"random", "json", "video"} {
		b.Run(payload, func(b *testing.B) {
			var recs []localstream.Record
			if payload == "video" {
				recs = harnessRecords(4, "random")
				rng := rand.New(rand.NewPCG(5, 6))
				for i := range recs {
					recs[i].Payload = make([]byte, 256<<10)
					for j := range recs[i].Payload {
						recs[i].Payload[j] = byte(rng.Uint32())
					}
				}
			} else {
				recs = harnessRecords(1000, payload)
			}
			w := NewPackWriter()
			var n int64
			for i := range recs {
				w.Add(&recs[i])
				n += int64(len(recs[i].Payload))
			}
			pack := w.Encode(testCommit(), 42, &PackHint{})
			b.SetBytes(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodePack("telemetry", pack); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
