package watermark

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// The benchmarks use 20 writers, one routing key each, on a stream of 4
// segments. Baselines measured in the same run: a durable Append (what
// each Note accompanies) and a bare Topology.Covering of the 20 marks
// (what any committed-cut computation pays).

const benchWriters = 20

// benchKeys are 20 routing keys spread over the key space (with
// localstream.KeyHash, names that differ only in their last byte, such as
// drone-01 and drone-02, hash to nearly the same point).
func benchKeys() []string {
	return []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
		"kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"}[:benchWriters]
}

func benchStore(b *testing.B) (*localstream.Store, *localstream.Stream) {
	s, err := localstream.Open(b.TempDir(), localstream.Options{MinFreeBytes: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	st, err := s.CreateStream("video", localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 4}})
	if err != nil {
		b.Fatal(err)
	}
	return s, st
}

// appendRound appends one event per writer concurrently (one group commit)
// and returns their positions.
func appendRound(b *testing.B, st *localstream.Stream, keys []string, et int64) []localstream.Position {
	pos := make([]localstream.Position, len(keys))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, k := range keys {
		wg.Add(1)
		err := st.AppendAsync(context.Background(), localstream.Event{RoutingKey: k, Writer: "w/" + k, EventTime: et, Payload: []byte("x")},
			func(p localstream.Position, err error) {
				mu.Lock()
				pos[i] = p
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				wg.Done()
			})
		if err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return pos
}

// BenchmarkBaselineAppend: one durable Append (fsync'd group commit, one
// appender) per op, round-robin over the 20 writers.
func BenchmarkBaselineAppend(b *testing.B) {
	_, st := benchStore(b)
	keys := benchKeys()
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%len(keys)]
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: k, Writer: "w/" + k, EventTime: int64(i), Payload: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNote: Late + Note of one event on a Tracker over a real
// store's stream, round-robin over 20 writers (marks written every 1s).
func BenchmarkNote(b *testing.B) {
	s, st := benchStore(b)
	keys := benchKeys()
	tr, err := NewTracker(st, s, Options{})
	if err != nil {
		b.Fatal(err)
	}
	first := appendRound(b, st, keys, 0)
	for i, k := range keys {
		if err := tr.Note("w/"+k, 0, first[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		j := i % len(keys)
		p := first[j]
		p.Offset += uint64(i/len(keys)) + 1 // offsets past the durable end: Note does not read the store
		w := "w/" + keys[j]
		tr.Late(w, int64(i+1))
		if err := tr.Note(w, int64(i+1), p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmit: Admit + NoteAdmitted of one event, bounded by the
// receiving clock, as BenchmarkNote does with Late + Note; every fourth
// writer's clock is an hour ahead (flagged, mark bounded).
func BenchmarkAdmit(b *testing.B) {
	s, st := benchStore(b)
	keys := benchKeys()
	const base = int64(1_800_000_000_000_000_000)
	tr, err := NewTracker(st, s, Options{Now: func() time.Time { return time.Unix(0, base) }})
	if err != nil {
		b.Fatal(err)
	}
	first := appendRound(b, st, keys, base)
	for i, k := range keys {
		if err := tr.Note("w/"+k, base, first[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		j := i % len(keys)
		p := first[j]
		p.Offset += uint64(i/len(keys)) + 1
		w := "w/" + keys[j]
		ingest := base + int64(i+1)
		et := ingest
		if j%4 == 0 {
			et += int64(time.Hour)
		}
		a := tr.Admit(w, et, ingest)
		if err := tr.NoteAdmitted(w, a, et, p); err != nil {
			b.Fatal(err)
		}
	}
}

// benchSim builds a 4-segment simulated stream with 20 noted writers.
func benchSim(b *testing.B) (*simStream, *core, []string) {
	sim := newSimStream("video", 4)
	c := newCore("video", coreConfig{})
	keys := benchKeys()
	for i, k := range keys {
		if err := c.note(sim.snapshot(), "w/"+k, int64(i), sim.append(k), 1); err != nil {
			b.Fatal(err)
		}
	}
	return sim, c, keys
}

// BenchmarkBaselineCovering: Topology.Covering of the 20 writers' marks
// over a committed cut, the least a committed watermark costs.
func BenchmarkBaselineCovering(b *testing.B) {
	sim, c, _ := benchSim(b)
	topo := sim.snapshot()
	cut := topo.TailCut()
	var pos []localstream.Position
	for _, w := range c.writers {
		pos = append(pos, w.pos...)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := topo.Covering(cut, pos...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommittedAt: the deterministic core's committed watermark over
// the tail cut after every writer noted one more event (so each op emits
// a new watermark). The 20 appends and notes are outside the timer.
func BenchmarkCommittedAt(b *testing.B) {
	sim, c, keys := benchSim(b)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for _, k := range keys {
			if err := c.note(sim.snapshot(), "w/"+k, int64(100+i), sim.append(k), 1); err != nil {
				b.Fatal(err)
			}
		}
		topo := sim.snapshot()
		cut := topo.TailCut()
		b.StartTimer()
		if _, err := c.committedAt(topo, cut, 1); err != nil {
			b.Fatal(err)
		}
	}
	if c.stats.CommittedEmitted < uint64(b.N) {
		b.Fatalf("emitted %d of %d", c.stats.CommittedEmitted, b.N)
	}
}

// BenchmarkCommittedAtTracker: Tracker.CommittedAt over a real store after
// every writer appended and noted one more event; each op emits and
// persists a new watermark (one fsync'd meta write, plus the marks once a
// second). Appends and notes are outside the timer.
func BenchmarkCommittedAtTracker(b *testing.B) {
	s, st := benchStore(b)
	keys := benchKeys()
	tr, err := NewTracker(st, s, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		pos := appendRound(b, st, keys, int64(100+i))
		for j, k := range keys {
			if err := tr.Note("w/"+k, int64(100+i), pos[j]); err != nil {
				b.Fatal(err)
			}
		}
		cut := st.TailCut()
		b.StartTimer()
		if _, err := tr.CommittedAt(cut); err != nil {
			b.Fatal(err)
		}
	}
	if got := tr.Stats().CommittedEmitted; got < uint64(b.N) {
		b.Fatalf("emitted %d of %d", got, b.N)
	}
}
