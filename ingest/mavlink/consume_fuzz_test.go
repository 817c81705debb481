package mavlink

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/frame"

	"github.com/edge-agent/edge-agent/localstream"
)

// memAppender keeps appended events in memory (for the fuzz target only:
// the tests use the real store).
type memAppender struct{ evs []localstream.Event }

func (m *memAppender) AppendGroupAsync(_ context.Context, evs []localstream.Event, cb func([]localstream.Position, error), _ ...localstream.AppendOption) error {
	var pos []localstream.Position
	for _, ev := range evs { // the caller reuses their memory
		ev.Payload, ev.Headers = bytes.Clone(ev.Payload), slices.Clone(ev.Headers)
		m.evs = append(m.evs, ev)
		pos = append(pos, localstream.Position{Offset: uint64(len(m.evs))})
	}
	cb(pos, nil)
	return nil
}

// FuzzConsume runs the intake's whole frame path (split, signature,
// drone slots, sequence, time, rates) over plain and tlog streams: it
// never panics, and every event holds bytes of the input, byte for byte.
func FuzzConsume(f *testing.F) {
	key := bytes.Repeat([]byte{3}, 32)
	var plain, tlog []byte
	for i, w := range []*gomavlibWriter{newWriter(f, false, 1, 1, nil), newWriter(f, true, 2, 1, nil), newWriter(f, false, 3, 1, frame.NewV2Key(key))} {
		for j, m := range sampleMessages(i) {
			if i == 1 && m.GetID() > 255 {
				continue
			}
			fr := w.frame(f, m)
			plain = append(plain, fr...)
			tlog = AppendTlogEntry(tlog, time.Unix(1_800_000_000, int64(j)*1e6), fr)
		}
	}
	f.Add(plain, false)
	f.Add(tlog, true)
	f.Fuzz(func(t *testing.T, b []byte, isTlog bool) {
		cfg := localConfig()
		cfg.MaxDrones = 2
		cfg.Rates = map[string]float64{"ATTITUDE": 10}
		cfg.Logger = slog.New(slog.DiscardHandler)
		m := &memAppender{}
		in, err := New(cfg, Sink{Stream: m})
		if err != nil {
			t.Fatal(err)
		}
		in.signer = &signer{key: [32]byte(key)}
		in.ctx = context.Background()
		consume := in.consume
		if isTlog {
			consume = in.consumeTlog
		}
		for rest := b; len(rest) > 0; {
			n := consume(rest, time.Now().UnixNano(), source{conn: 1})
			if n == 0 {
				break
			}
			rest = rest[n:]
		}
		in.mu.Lock()
		in.flush()
		in.mu.Unlock()
		for _, ev := range m.evs {
			if !bytes.Contains(b, ev.Payload) || len(ev.Payload) > maxFrameLen {
				t.Fatalf("event payload % x is not a frame of the input", ev.Payload)
			}
		}
	})
}
