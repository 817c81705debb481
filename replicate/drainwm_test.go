package replicate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestDrainWatermarkWithinBound (issue 38): the backlog of a 600 s outage
// (4 drones × 20 Hz, the rate, event times in the past) drains
// through a capped link with the real watermark tracker; every commit's
// lower must be within the documented bound (docs/watermark.md: the
// backlog's span ÷ 256) of the oldest of the drones' newest events it
// committed — the watermark follows the drain from its first commit
// instead of holding at the outage's start until the drain passes the
// history's last halving (the halving history fails it: lower 5m43.75s
// behind, bound 2.58 s; at 5 Hz it failed by 22 ms only).
func TestDrainWatermarkWithinBound(t *testing.T) {
	const drones, hz, outage = 4, 20, 600 * time.Second
	_, up, nc := meteredLink(t, 10_000)
	_, st := openStore(t, t.TempDir())
	tr := trackerFor(st)
	ctx := testCtx(t, 2*time.Minute)
	// Drone d's events are at times ≡ d (mod drones) ns: a commit's
	// events tell their drones by their times alone.
	start := (time.Now().Add(-outage).UnixNano() / drones) * drones
	n := drones * hz * int(outage/time.Second)
	evs := make([]localstream.Event, 0, n)
	for i := range n {
		d := i % drones
		at := start + int64(i/drones)*int64(time.Second/hz) + int64(d)
		w := fmt.Sprintf("telemetry/drone-%d", d)
		evs = append(evs, localstream.Event{RoutingKey: fmt.Sprint("drone-", d), Writer: w, EventTime: at, IngestTime: at,
			Payload: fmt.Appendf(nil, `{"drone":"drone-%d","t":%d,"alt":%d}`, d, at, 100+i%50)})
	}
	for i := 0; i < n; i += 1000 {
		group := evs[i:min(i+1000, n)]
		done := make(chan error, 1)
		var pos []localstream.Position
		if err := st.AppendGroupAsync(ctx, group, func(p []localstream.Position, err error) { pos = p; done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for j, ev := range group {
			if err := tr.Note(ev.Writer, ev.EventTime, pos[j]); err != nil {
				t.Fatal(err)
			}
		}
	}
	bound := int64(outage+time.Minute) / 256 // span: the outage and the drain
	var mu sync.Mutex
	newest := map[int64]int64{} // drone → newest committed event time
	var worst, commits int
	var worstLag int64
	var fail string
	r := NewReplicator(st, newSink(t, nc, "drainwm"), newInstance(), ReplicatorConfig{Uplink: up,
		Watermark: TrackerWatermark(tr, nil),
		OnCommit: func(c Committed, ingest []int64) {
			mu.Lock()
			defer mu.Unlock()
			for _, at := range ingest {
				newest[at%drones] = max(newest[at%drones], at)
			}
			if len(newest) < drones || c.Record.Watermark.LowerNs == 0 {
				return
			}
			oldest := int64(1<<63 - 1)
			for _, at := range newest {
				oldest = min(oldest, at)
			}
			commits++
			if lag := oldest - c.Record.Watermark.LowerNs; lag > worstLag {
				worst, worstLag = commits, lag
				if lag >= bound {
					fail = fmt.Sprintf("commit %d (seq %d): lower %s behind the oldest of the drones' newest committed events, bound %s",
						commits, c.Seq, time.Duration(lag), time.Duration(bound))
				}
			}
		}})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	tail := st.TailCut()
	testkit.WaitFor(t, 90*time.Second, "the backlog committed", func() bool {
		c, ok, _ := st.CommittedCut("central")
		return ok && c.Equal(tail)
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d commits with a watermark; the furthest behind: commit %d, %s (bound %s)", commits, worst, time.Duration(worstLag), time.Duration(bound))
	if commits < 3 {
		t.Fatalf("only %d commits checked: not a drain", commits)
	}
	if fail != "" {
		t.Fatal(fail)
	}
}
