package live

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestBacklogUnchangedByLane: two stations get the same events — a
// capture made offline, then drones flying on while the backlog drains —
// over the same capped link, one with the live lane and one without. What
// a consumer of the EDGE_* streams reads is the same: every event exactly
// once, in per-drone order, the same events, the same committed watermark
// at every cut both chains committed (and the same final cut), and no
// watermark ahead of the data committed after it.
func TestBacklogUnchangedByLane(t *testing.T) {
	const link = 2_000_000 / 8
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	with := newStation(t, stationOpts{proxyBps: link})
	without := newStation(t, stationOpts{proxyBps: link})
	with.proxy.setDown(true)
	without.proxy.setDown(true)
	with.start(stationOpts{capBps: link, lane: true})
	without.start(stationOpts{capBps: link})
	// Appends run to the end whatever the fly's deadline: an append cut
	// short may or may not be stored, and the count must be exact.
	both := func(_ context.Context, stream string, ev localstream.Event) error {
		if err := with.append(ctx, stream, ev); err != nil {
			return err
		}
		return without.append(ctx, stream, ev)
	}
	f := newFleet(4, 2)
	if err := f.capture(ctx, both, 8*time.Second, time.Now()); err != nil {
		t.Fatal(err)
	}
	flyCtx, stopFly := context.WithTimeout(ctx, 4*time.Second)
	defer stopFly()
	with.proxy.setDown(false)
	without.proxy.setDown(false)
	if err := f.fly(flyCtx, both); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*station{with, without} {
		if err := s.repl.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var sent uint64
	for _, st := range with.lane.Stats().Streams {
		sent += st.Sent
	}
	if sent == 0 || with.proxy.liveMsgs.Load() == 0 {
		t.Fatalf("the lane sent nothing (%d values, %d at the link): the comparison proves nothing", sent, with.proxy.liveMsgs.Load())
	}
	for _, stream := range []string{"telemetry", "video"} {
		a := readBacklog(t, ctx, with, stream)
		b := readBacklog(t, ctx, without, stream)
		want := 0
		for d, n := range f.seq {
			if stream == "telemetry" && slices.Contains(f.telemetry, d) {
				want += n
			}
		}
		if stream == "video" {
			want = -1 // counted below against the other run
		}
		if err := a.check(want); err != nil {
			t.Errorf("%s with the lane: %v", stream, err)
		}
		if err := b.check(want); err != nil {
			t.Errorf("%s without the lane: %v", stream, err)
		}
		for d, evs := range a.events {
			if !slices.Equal(evs, b.events[d]) {
				t.Errorf("%s/%s: %d events with the lane, %d without, or not the same", stream, d, len(evs), len(b.events[d]))
			}
		}
		if len(a.events) != len(b.events) {
			t.Errorf("%s: %d drones with the lane, %d without", stream, len(a.events), len(b.events))
		}
		common := 0
		for cut, wm := range a.watermarks {
			if wb, ok := b.watermarks[cut]; ok {
				common++
				if wm != wb {
					t.Errorf("%s: at cut %s the committed watermark is %v with the lane, %v without", stream, cut, wm, wb)
				}
			}
		}
		if a.lastCut != b.lastCut {
			t.Errorf("%s: last committed cut %s with the lane, %s without", stream, a.lastCut, b.lastCut)
		}
		t.Logf("%s: %d events once and in order in both; %d and %d commits, %d at the same cut with the same watermark; live values sent %d",
			stream, a.total, len(a.watermarks), len(b.watermarks), common, sent)
		if common == 0 {
			t.Errorf("%s: no cut committed by both: nothing compared", stream)
		}
	}
}

// backlog is what a consumer reads of one agent's stream at the centre.
type backlog struct {
	events     map[string][]string // drone → "event time/payload hash", in order
	total      int
	watermarks map[string][2]int64 // commit cut → watermark (lower, upper)
	lastCut    string
	errs       []string
}

func readBacklog(t *testing.T, ctx context.Context, s *station, stream string) *backlog {
	t.Helper()
	items, err := centralread.ReadAll(ctx, s.reader, stream, centralread.ReadOptions{Agent: s.agent})
	if err != nil {
		t.Fatal(err)
	}
	b := &backlog{events: map[string][]string{}, watermarks: map[string][2]int64{}}
	seen := map[localstream.Position]bool{}
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemCommit:
			b.watermarks[it.Commit.CutText] = [2]int64{it.Commit.Watermark.LowerNs, it.Commit.Watermark.UpperNs}
			b.lastCut = it.Commit.CutText
		case centralread.ItemEvent:
			rec := it.Event.Record
			if seen[rec.Position] {
				b.errs = append(b.errs, fmt.Sprintf("%v twice", rec.Position))
			}
			seen[rec.Position] = true
			if rec.EventTime < it.Watermark.LowerNs && !rec.Flags.Has(localstream.FlagLate) {
				b.errs = append(b.errs, fmt.Sprintf("%s at %d after a committed watermark of %d", rec.RoutingKey, rec.EventTime, it.Watermark.LowerNs))
			}
			if prevs := b.events[rec.RoutingKey]; len(prevs) > 0 {
				var prev int64
				fmt.Sscanf(prevs[len(prevs)-1], "%d/", &prev)
				if rec.EventTime <= prev {
					b.errs = append(b.errs, fmt.Sprintf("%s out of order: %d after %d", rec.RoutingKey, rec.EventTime, prev))
				}
			}
			b.events[rec.RoutingKey] = append(b.events[rec.RoutingKey], fmt.Sprintf("%d/%x", rec.EventTime, sha256.Sum256(rec.Payload)))
			b.total++
		}
	}
	return b
}

// check reports duplicates, disorder, watermarks ahead of data and a
// count other than want (< 0: not checked).
func (b *backlog) check(want int) error {
	if len(b.errs) > 0 {
		return fmt.Errorf("%d problems, first: %s", len(b.errs), b.errs[0])
	}
	if want >= 0 && b.total != want {
		return fmt.Errorf("%d events at the centre, %d appended", b.total, want)
	}
	return nil
}
