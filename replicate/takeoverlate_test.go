package replicate

import (
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestTakeoverBacklogFlaggedLate (issue 29 case 5): a store takes over a
// chain (--takeover) whose committed watermark is a minute ahead of its
// own backlog. Every event after a commit record whose watermark lower
// is L has a time of at least L or is flagged late, and a time cut
// inside the backlog is never complete while unflagged events ≤ T are
// still to come.
func TestTakeoverBacklogFlaggedLate(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	p, q := newProducer(), newProducer()
	q.base = p.base - int64(60*time.Second)
	a := startNode(t, nc, t.TempDir(), "agent-tl", ReplicatorConfig{})
	p.add(t, a.st, 30)
	waitAllAt(t, nc, a, "agent-tl", p, 20*time.Second)
	a.stop(t)

	dirB := t.TempDir()
	sb, stb := openStore(t, dirB)
	q.add(t, stb, 40) // captured a minute behind the chain's watermark
	sb.Close()
	b := startNode(t, nc, dirB, "agent-tl", ReplicatorConfig{Takeover: true})
	defer b.stop(t)
	waitAllAt(t, nc, b, "agent-tl", q, 20*time.Second)

	items, err := centralread.ReadAll(testCtx(t, 30*time.Second), nc, testStream, centralread.ReadOptions{Agent: "agent-tl"})
	if err != nil {
		t.Fatal(err)
	}
	var lower int64
	late, unflagged := 0, 0
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemCommit:
			lower = max(lower, it.Commit.Watermark.LowerNs)
		case centralread.ItemEvent:
			r := it.Event.Record
			switch {
			case r.Flags.Has(localstream.FlagLate):
				late++
			case r.EventTime < lower:
				unflagged++
			}
		}
	}
	if unflagged > 0 {
		t.Fatalf("%d events after a committed watermark lower above their time, not flagged late (%d flagged)", unflagged, late)
	}
	at := q.base + 20*1000
	cut, err := centralread.CutAt(testCtx(t, 30*time.Second), nc, at, centralread.TimeCutOptions{Streams: []string{testStream}, Agent: "agent-tl"})
	if err != nil {
		t.Fatal(err)
	}
	contains := func(_, _ string, c localstream.StreamCut, pos localstream.Position) (bool, error) {
		off, ok := c.Positions[pos.Segment]
		return ok && pos.Offset < off, nil
	}
	if err := cut.Verify(map[string][]centralread.Item{testStream: items}, contains); err != nil {
		t.Fatalf("time cut inside the taken-over backlog: %v", err)
	}
	if late != 40 {
		t.Fatalf("%d of the 40 backlog events flagged late", late)
	}
	t.Logf("%d backlog events flagged late; time cut at T: complete %v", late, cut.Complete)
}
