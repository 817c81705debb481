package replicate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// TestPrefetchDerivedCuts: the cut the replicator derives after each
// prefetched record (advanceCut) is the reader's own cut after it, across
// a split, a merge and segments whose events were all shed (the reader
// skips such holes and moves to successors without returning a record).
func TestPrefetchDerivedCuts(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	ctx := context.Background()
	appendN := func(n int) {
		for i := range n {
			d := fmt.Sprintf("drone-%d", i%29)
			if _, err := st.Append(ctx, localstream.Event{RoutingKey: d, Writer: "telemetry/" + d, Payload: []byte{byte(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(60)
	open := st.Topology().Open()
	succ, err := st.Split(open[0].ID, 2) // seals the first segment
	if err != nil {
		t.Fatal(err)
	}
	appendN(20)
	// Two readers from the same start, created before the shed: one
	// through the prefetcher, one read directly as the reference.
	viaPrefetch, err := st.NewReader(st.HeadCut(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reference, err := st.NewReader(st.HeadCut(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Shed all of the sealed segment (it gets no gap marker: a hole the
	// reader skips without a record) and half of the other.
	sealed := st.Topology().Segments[0]
	if sealed.ID != open[0].ID || sealed.Length == 0 {
		t.Fatalf("segment %s of %d events: want the first, sealed, not empty", sealed.ID, sealed.Length)
	}
	shedTo := localstream.StreamCut{Stream: st.Name(), Positions: map[localstream.SegmentID]uint64{
		open[0].ID: sealed.Length, open[1].ID: st.TailCut().Positions[open[1].ID] / 2}}
	if _, err := st.Shed(ctx, shedTo, "test"); err != nil {
		t.Fatal(err)
	}
	appendN(40)
	if _, err := st.Merge(succ...); err != nil {
		t.Fatal(err)
	}
	appendN(30)

	cut, owned := viaPrefetch.Cut(), false
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pf := newPrefetcher(pctx, viaPrefetch, 64, 1<<20) // small batches and budget
	defer pf.close()
	n := 0
	for {
		want, err := reference.TryNext()
		if errors.Is(err, localstream.ErrCaughtUp) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		f, ok := pf.head()
		for !ok {
			select {
			case b := <-pf.ch:
				pf.put(b)
			case <-time.After(10 * time.Second):
				t.Fatalf("record %d: nothing prefetched", n)
			}
			f, ok = pf.head()
		}
		if f.err != nil {
			t.Fatal(f.err)
		}
		pf.pop()
		cut, owned = advanceCut(cut, owned, &f)
		if f.rec.Position != want.Position {
			t.Fatalf("record %d at %s, want %s", n, f.rec.Position, want.Position)
		}
		if !cut.Equal(reference.Cut()) {
			t.Fatalf("record %d (%s): derived cut %s, reader's %s", n, want.Position, cut, reference.Cut())
		}
		n++
	}
	if n < 100 || reference.Reshapes() < 3 {
		t.Fatalf("%d records, %d reshapes: the test did not exercise holes and scaling", n, reference.Reshapes())
	}
}

// TestPrefetchTailOnlyAtTheTail: a batch says the reader was at the
// stream's tail only when it was — every batch of a stored backlog but
// the last says more is stored, so the builder's dry rule (sendNow) does
// not close a pack because the reader is behind; the last batch, and one
// of an event appended after it, say tail.
func TestPrefetchTailOnlyAtTheTail(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	ctx := context.Background()
	const n = 5*prefetchBatchRecords + 17
	for i := range n {
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: "drone-1", Writer: "telemetry/drone-1", Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := st.NewReader(st.HeadCut(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pf := newPrefetcher(pctx, rd, 4096, 16<<20)
	defer pf.close()
	next := func() prefetchBatch {
		select {
		case b := <-pf.ch:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("nothing prefetched")
		}
		return prefetchBatch{}
	}
	got := 0
	for got < n {
		b := next()
		got += len(b.recs)
		if atEnd := got == n; b.tail != atEnd {
			t.Fatalf("batch ending at record %d of %d stored says tail=%v", got, n, b.tail)
		}
	}
	if _, err := st.Append(ctx, localstream.Event{RoutingKey: "drone-1", Writer: "telemetry/drone-1", Payload: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	if b := next(); len(b.recs) != 1 || !b.tail {
		t.Fatalf("the appended event came as %d records, tail=%v", len(b.recs), b.tail)
	}
}
