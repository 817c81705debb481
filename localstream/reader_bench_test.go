package localstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
)

// benchEvents returns n telemetry-like events of 8 drones with payloads
// of 200 random bytes (the peers harness's shape).
func benchEvents(n int) []Event {
	rng := rand.New(rand.NewPCG(1, 2))
	evs := make([]Event, n)
	for i := range evs {
		d := fmt.Sprintf("drone-%d", i%8)
		p := make([]byte, 200)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		evs[i] = Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: int64(i) * 1e6, IngestTime: int64(i) * 1e6,
			ContentType: "application/octet-stream", Headers: []Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}},
			Payload: p}
	}
	return evs
}

// appendAll appends evs concurrently (they share group commits) and waits.
func appendAll(b *testing.B, st *Stream, evs []Event) {
	var wg sync.WaitGroup
	for _, ev := range evs {
		wg.Add(1)
		if err := st.AppendAsync(context.Background(), ev, func(_ Position, err error) {
			if err != nil {
				b.Error(err)
			}
			wg.Done()
		}); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
}

func benchStream(b *testing.B, segs int) (*Store, *Stream) {
	s, err := Open(b.TempDir(), Options{Durability: DurabilityPeriodic, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	st, err := s.CreateStream("telemetry", StreamConfig{Scaling: ScalingPolicy{MinSegments: segs}})
	if err != nil {
		b.Fatal(err)
	}
	return s, st
}

// BenchmarkReader measures the read path per event (ns/op and allocs/op
// are per event read): "backlog" reads a pre-filled stream from its head,
// "tail" follows a live stream that grows by a group commit of 16 events
// at a time (the replicator's case at the harness's rates: a fill per
// commit).
func BenchmarkReader(b *testing.B) {
	for _, segs := range []int{1, 4} {
		b.Run(fmt.Sprintf("backlog/segments=%d", segs), func(b *testing.B) {
			_, st := benchStream(b, segs)
			evs := benchEvents(20000)
			appendAll(b, st, evs)
			var rd *Reader
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if rd == nil {
					tail := st.TailCut()
					var err error
					if rd, err = st.NewReader(st.HeadCut(), &tail); err != nil {
						b.Fatal(err)
					}
				}
				_, err := rd.TryNext()
				if errors.Is(err, ErrEndOfCut) {
					rd = nil
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("tail/segments=%d", segs), func(b *testing.B) {
			_, st := benchStream(b, segs)
			evs := benchEvents(4096)
			rd, err := st.NewReader(st.HeadCut(), nil)
			if err != nil {
				b.Fatal(err)
			}
			const group = 16
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				b.StopTimer()
				k := min(group, b.N-i)
				j := i % len(evs)
				appendAll(b, st, evs[j:min(j+k, len(evs))])
				k = min(k, len(evs)-j)
				b.StartTimer()
				for range k {
					if _, err := rd.TryNext(); err != nil {
						b.Fatal(err)
					}
				}
				i += k
			}
		})
	}
}
