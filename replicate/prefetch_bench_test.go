package replicate

import (
	"context"
	"fmt"
	"testing"

	"github.com/edge-agent/edge-agent/localstream"
)

// BenchmarkPrefetch reads a pre-filled local stream through the
// replicator's prefetcher (reader, cut per record, channel, byte budget)
// as collect consumes it.
// ns/op and allocs/op are per event.
func BenchmarkPrefetch(b *testing.B) {
	_, st := openStore(b, b.TempDir())
	const n = 20000
	p := make([]byte, 200)
	for i := 0; i < n; i += 500 {
		evs := make([]localstream.Event, 0, 500)
		for j := range 500 {
			d := fmt.Sprintf("drone-%d", (i+j)%8)
			evs = append(evs, localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: int64(i + j),
				IngestTime: int64(i + j), ContentType: "application/octet-stream",
				Headers: []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}}, Payload: p})
		}
		appendConcurrently(b, st, evs)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		rd, err := st.NewReader(st.HeadCut(), nil)
		if err != nil {
			b.Fatal(err)
		}
		cut, owned := rd.Cut(), false
		ctx, cancel := context.WithCancel(context.Background())
		pf := newPrefetcher(ctx, rd, 4096, 16<<20)
		for k := 0; k < n && i < b.N; k, i = k+1, i+1 {
			f, ok := pf.head()
			if !ok {
				pf.put(<-pf.ch)
				f, _ = pf.head()
			}
			if f.err != nil {
				b.Fatal(f.err)
			}
			pf.pop()
			cut, owned = advanceCut(cut, owned, &f)
		}
		cancel()
		pf.close()
	}
}

// appendConcurrently appends evs so that they share group commits.
func appendConcurrently(b *testing.B, st *localstream.Stream, evs []localstream.Event) {
	done := make(chan error, len(evs))
	for _, ev := range evs {
		if err := st.AppendAsync(context.Background(), ev, func(_ localstream.Position, err error) { done <- err }); err != nil {
			b.Fatal(err)
		}
	}
	for range evs {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
