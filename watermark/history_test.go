package watermark

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// historyBound is the documented bound (docs/watermark.md): a committed
// lower is less than 4 × span / maxHistory behind the newest event of each
// writer inside the cut, span being the largest time span of the writer's
// uncommitted marks.
func historyBound(span int64) int64 { return 4*span/maxHistory + 1 }

// TestHistoryEvenOverBacklog is a model test of an outage and its drain
// (issue 38): writers note at random rates for a random span with the
// committed cut stuck, then the cut advances through the backlog in random
// steps while they keep noting at the head. After every commit the
// committed lower must be within historyBound of the oldest of the
// writers' newest events inside the cut — the marks kept evenly over the
// whole backlog, not thinned hardest where the drain starts.
//
// On main (halving, oldest mark kept) the lower stayed at the outage's
// start until the drain passed the last halving's survivors.
func TestHistoryEvenOverBacklog(t *testing.T) {
	seed := testkit.Seed(t)
	for r := range testkit.Rounds(8) {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		if err := runBacklogModel(rng); err != nil {
			t.Fatalf("round %d (EDGE_SEED=%d): %v", r, seed, err)
		}
	}
}

// runBacklogModel runs one outage and drain with rng's choices.
func runBacklogModel(rng *rand.Rand) error {
	writers := 1 + rng.IntN(4)
	outage := time.Duration(300+rng.IntN(900)) * time.Second // ≥ 1500 marks a writer
	sim := newSimStream("telemetry", 1)
	c := newCore("telemetry", coreConfig{})
	// Each writer notes every period (10–200 ms) with a random phase.
	period := make([]int64, writers)
	next := make([]int64, writers)
	const t0 = int64(1_700_000_000e9)
	for i := range writers {
		period[i] = int64(20+rng.IntN(180)) * int64(time.Millisecond)
		next[i] = t0 + rng.Int64N(period[i])
	}
	var events []simEvent
	first := map[string]int64{}
	noteUntil := func(until int64) error {
		for {
			i := -1
			for j := range writers {
				if next[j] < until && (i < 0 || next[j] < next[i]) {
					i = j
				}
			}
			if i < 0 {
				return nil
			}
			id := fmt.Sprintf("telemetry/drone-%d", i)
			p := sim.append(id)
			if err := c.note(sim.snapshot(), id, next[i], p, next[i]); err != nil {
				return err
			}
			if _, ok := first[id]; !ok {
				first[id] = next[i]
			}
			events = append(events, simEvent{pos: p, writer: id, t: next[i]})
			next[i] += period[i]
		}
	}
	now := t0 + int64(outage)
	if err := noteUntil(now); err != nil {
		return err
	}
	seg := localstream.NewSegmentID(0, 0)
	var committed uint64
	newest := map[string]int64{} // each writer's newest event inside the cut
	checked, arrived := 0, len(events)
	var worst error // the commit furthest past the bound
	var worstLag int64
	// The drain ends with the commit that takes all that had arrived
	// before it: a writer noting at every step (a 20 ms period) would
	// otherwise keep the model from ever ending.
	for drained := false; !drained; {
		// The drain commits a random slice of the backlog while the
		// writers go on at the head (a drain ~5–50× faster than real time).
		// At least what arrived since the last commit: the drain catches up.
		step := uint64(len(events)-arrived) + uint64(1+rng.IntN(40*writers))
		arrived = len(events)
		for _, e := range events[committed:min(uint64(len(events)), committed+step)] {
			newest[e.writer] = e.t
		}
		committed = min(uint64(len(events)), committed+step)
		drained = committed == uint64(len(events))
		now += int64(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		if err := noteUntil(now); err != nil {
			return err
		}
		cut := localstream.StreamCut{Stream: "telemetry", Positions: map[localstream.SegmentID]uint64{seg: committed}}
		wm, err := c.committedAt(sim.snapshot(), cut, now)
		if err != nil {
			return err
		}
		// Oldest of the writers' newest events inside the cut, and the
		// span of the history: every writer's events from its first not
		// committed 32 commits ago (a safe over-estimate: all of them).
		if len(newest) < writers {
			continue // a writer with nothing inside: its floor holds
		}
		oldest := int64(1<<63 - 1)
		var span int64
		for id, tn := range newest {
			oldest = min(oldest, tn)
			span = max(span, now-first[id])
		}
		if lag := oldest - wm.LowerNs; lag >= historyBound(span) && lag > worstLag {
			worstLag = lag
			worst = fmt.Errorf("%d writers, outage %s: commit up to %d of %d has lower %s behind its oldest newest event (bound %s over a span of %s)",
				writers, outage, committed, len(events), time.Duration(lag), time.Duration(historyBound(span)), time.Duration(span))
		}
		for id, w := range c.writers {
			if len(w.hist) > maxHistory {
				return fmt.Errorf("writer %s holds %d marks", id, len(w.hist))
			}
		}
		checked++
	}
	if worst != nil {
		return worst
	}
	if checked == 0 || c.stats.HistoryThinned == 0 {
		return fmt.Errorf("nothing checked (%d commits) or nothing thinned (%d)", checked, c.stats.HistoryThinned)
	}
	return nil
}
