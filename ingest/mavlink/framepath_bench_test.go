package mavlink

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// nullAppender takes groups and drops them: the frame path's own cost.
type nullAppender struct{}

func (nullAppender) AppendGroupAsync(_ context.Context, _ []localstream.Event, cb func([]localstream.Position, error), _ ...localstream.AppendOption) error {
	cb(nil, nil)
	return nil
}

// BenchmarkFramePath is the intake's CPU per frame without sockets or a
// store: 20 drones' gomavlib-written frames, interleaved, read in 4 KiB
// pieces as from a TCP stream (split, checks, drone slot, sequence window,
// event time, batching). 256 frames a drone, so that the next loop goes
// on with the next sequence numbers. The ns/op is per frame.
func BenchmarkFramePath(b *testing.B) {
	var stream []byte
	ws := make([]*gomavlibWriter, 20)
	for i := range ws {
		ws[i] = newWriter(b, false, uint8(10+i), 1, nil)
	}
	n := 0
	for i := range 256 {
		for _, w := range ws {
			stream = append(stream, w.frame(b, sampleMessages(i)[i%4])...)
			n++
		}
	}
	cfg := localConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	in, err := New(cfg, Sink{Stream: nullAppender{}})
	if err != nil {
		b.Fatal(err)
	}
	in.ctx = context.Background()
	b.ResetTimer()
	frames := 0
	for b.Loop() {
		for rest := stream; len(rest) > 0; {
			k := in.consume(rest[:min(len(rest), 4096)], time.Now().UnixNano(), source{conn: 1})
			rest = rest[k:]
		}
		frames += n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
	if s := in.Stats(); s.Duplicates != 0 || s.Lost != 0 {
		b.Fatalf("stats %+v", s)
	}
}
