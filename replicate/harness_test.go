package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

const testStream = "telemetry"

// openStore opens a real Badger store with the test stream (two segments).
func openStore(t testing.TB, dir string) (*localstream.Store, *localstream.Stream) {
	t.Helper()
	s, st, err := openStoreErr(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func openStoreErr(dir string) (*localstream.Store, *localstream.Stream, error) {
	return openStoreOpts(dir, localstream.Options{})
}

// openStoreOpts is openStoreErr with store options (a fleet's small stores).
func openStoreOpts(dir string, opts localstream.Options) (*localstream.Store, *localstream.Stream, error) {
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := localstream.Open(dir, opts)
	if err != nil {
		return nil, nil, err
	}
	st, err := s.CreateStream(testStream, localstream.StreamConfig{Scaling: localstream.ScalingPolicy{MinSegments: 2}})
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	tr, err := watermark.NewTracker(st, s, watermark.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	trackers.Store(st, tr)
	return s, st, nil
}

// trackers holds the real watermark tracker of each test stream: the
// appender notes into it, the replicator commits its watermarks.
var trackers sync.Map

func trackerFor(st *localstream.Stream) *watermark.Tracker {
	tr, _ := trackers.Load(st)
	t, _ := tr.(*watermark.Tracker)
	return t
}

type natsMsg = nats.Msg

// appender appends events for drones d0..d(n-1). Event times are one
// global increasing counter, so every later event is later in time: a
// correct committed watermark is then ≤ every event committed after it.
type appender struct {
	st     *localstream.Stream
	drones int
	base   int64
	n      atomic.Int64
}

func newAppender(st *localstream.Stream, drones int) *appender {
	a := &appender{st: st, drones: drones, base: time.Now().UnixNano()}
	// Continue the counter after a restart (times stay increasing).
	topo := st.Topology()
	var total uint64
	for _, s := range topo.Segments {
		total += s.Length
	}
	a.n.Store(int64(total) * 10)
	return a
}

func (a *appender) event(drone int) localstream.Event {
	i := a.n.Add(10)
	d := fmt.Sprintf("%d-drone", drone) // first byte varies: KeyHash spreads it
	ev := localstream.Event{
		RoutingKey: d, Writer: "telemetry/" + d, EventTime: a.base + i*1000, IngestTime: time.Now().UnixNano(),
		ContentType: "application/json",
		Headers:     []localstream.Header{{Key: "mqtt-topic", Value: "drones/" + d + "/telemetry"}},
		Payload:     fmt.Appendf(nil, `{"drone":%q,"i":%d}`, d, i),
	}
	if i%70 == 0 {
		ev.Flags |= localstream.FlagDiscontinuity
	}
	return ev
}

// warm appends one event per drone, in order, so that every writer is
// known before the replicator starts.
func (a *appender) warm(ctx context.Context) error {
	for d := range a.drones {
		if err := a.append(a.event(d)); err != nil {
			return err
		}
	}
	return nil
}

// append appends durably and notes the writer mark, as an ingest does.
func (a *appender) append(ev localstream.Event) error {
	tr := trackerFor(a.st)
	if tr != nil && tr.Late(ev.Writer, ev.EventTime) {
		ev.Flags |= localstream.FlagLate
	}
	pos, err := a.st.Append(context.Background(), ev)
	if err != nil || tr == nil {
		return err
	}
	return tr.Note(ev.Writer, ev.EventTime, pos)
}

// run appends a burst of events of distinct drones (concurrently, so group
// commit gathers them) every interval until ctx ends. One drone's events
// are appended one after the other, so its times grow in append order.
func (a *appender) run(ctx context.Context, interval time.Duration, burst int) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	burst = min(burst, a.drones)
	for k := 0; ; k += burst {
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for j := range burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Not ctx: a cancelled append may still land after run returns.
				if err := a.append(a.event((k + j) % a.drones)); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}()
		}
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// localEvents reads every event of the stream from its head.
func localEvents(t testing.TB, st *localstream.Stream) map[localstream.Position]localstream.Record {
	t.Helper()
	tail := st.TailCut()
	rd, err := st.NewReader(st.HeadCut(), &tail)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	out := map[localstream.Position]localstream.Record{}
	for {
		rec, err := rd.TryNext()
		if errors.Is(err, localstream.ErrEndOfCut) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[rec.Position] = rec
	}
}

// waitCaughtUp waits until the central commit of agent reaches the local tail.
func waitCaughtUp(t testing.TB, nc *nats.Conn, st *localstream.Stream, agent string, d time.Duration) Committed {
	t.Helper()
	tail := st.TailCut()
	var c Committed
	var err error
	if testkit.Until(d, func() bool {
		c, err = lastCommitted(context.Background(), nc, testStream, agent, 2*time.Second)
		if err != nil || c.Seq == 0 {
			return false
		}
		cut, _ := c.Record.StreamCut()
		le, _ := st.Topology().LessEq(tail, cut)
		return le
	}) {
		return c
	}
	t.Fatalf("central did not catch up with the local tail %s in %s: last %+v (%v)", tail, d, c.Record.CutText, err)
	return c
}

// verifyCentral proves the exactly-once contract for one agent: every
// local event exactly once, nothing else, per drone in order, every event
// equal to what was appended, each event's reported watermark the one of
// the commit before it, the commit chain gapless, and each commit's
// watermark lower ≤ the time of every non-late event committed after it.
func verifyCentral(t testing.TB, nc *nats.Conn, st *localstream.Stream, agent string) (events, commits int) {
	t.Helper()
	events, commits, _ = verifyCentralWith(t, nc, st, agent, nil)
	return events, commits
}

// verifyCentralMarked is verifyCentral where the events at marked
// positions must have arrived as markers (see CentralEvent.Dropped); it
// returns the markers.
func verifyCentralMarked(t testing.TB, nc *nats.Conn, st *localstream.Stream, agent string, marked map[localstream.Position]bool) map[localstream.Position]wire.CentralEvent {
	t.Helper()
	_, _, markers := verifyCentralWith(t, nc, st, agent, marked)
	return markers
}

func verifyCentralWith(t testing.TB, nc *nats.Conn, st *localstream.Stream, agent string, marked map[localstream.Position]bool) (events, commits int, markers map[localstream.Position]wire.CentralEvent) {
	t.Helper()
	items, err := centralread.ReadAll(testCtx(t, 60*time.Second), nc, testStream, centralread.ReadOptions{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	return verifyItemsWith(t, items, st, marked)
}

// verifyItems is verifyCentral on one agent's items, already read.
func verifyItems(t testing.TB, items []centralread.Item, st *localstream.Stream) (events, commits int) {
	t.Helper()
	events, commits, _ = verifyItemsWith(t, items, st, nil)
	return events, commits
}

func verifyItemsWith(t testing.TB, items []centralread.Item, st *localstream.Stream, marked map[localstream.Position]bool) (events, commits int, markers map[localstream.Position]wire.CentralEvent) {
	t.Helper()
	markers = map[localstream.Position]wire.CentralEvent{}
	local := localEvents(t, st)
	seen := map[localstream.Position]uint64{}
	lastPerDrone := map[string]int64{}
	var wm wire.WatermarkJSON
	var txn uint64
	var lowers []int64 // watermark lowers of commits so far, in order
	var maxLower int64
	pendingTxn := uint64(0)
	for _, it := range items {
		switch it.Kind {
		case centralread.ItemCommit:
			commits++
			if it.Commit.Txn != txn+1 {
				t.Fatalf("seq %d: commit txn %d after txn %d (chain broken)", it.Seq, it.Commit.Txn, txn)
			}
			txn = it.Commit.Txn
			wm = it.Commit.Watermark
			lowers = append(lowers, wm.LowerNs)
			maxLower = max(maxLower, wm.LowerNs)
		case centralread.ItemEvent:
			events++
			r := it.Event.Record
			if first, dup := seen[r.Position]; dup {
				t.Fatalf("event %s twice: seqs %d and %d", r.Position, first, it.Seq)
			}
			seen[r.Position] = it.Seq
			want, ok := local[r.Position]
			if !ok {
				t.Fatalf("seq %d: central event %s is not in the local store", it.Seq, r.Position)
			}
			switch {
			case marked[r.Position]:
				if it.Event.Dropped == "" {
					t.Fatalf("seq %d: event %s arrived, want a marker", it.Seq, r.Position)
				}
				if r.RoutingKey != want.RoutingKey || r.Writer != want.Writer || r.EventTime != want.EventTime {
					t.Fatalf("seq %d: marker %+v does not name the event %s of %q/%q", it.Seq, r, r.Position, want.RoutingKey, want.Writer)
				}
				markers[r.Position] = it.Event
			case it.Event.Dropped != "":
				t.Fatalf("seq %d: event %s arrived as a marker: %s", it.Seq, r.Position, it.Event.Dropped)
			case !reflect.DeepEqual(want, r):
				t.Fatalf("seq %d: central event differs:\n got %+v\nwant %+v", it.Seq, r, want)
			}
			if it.Event.Txn != txn+1 {
				t.Fatalf("seq %d: event of txn %d after commit of txn %d", it.Seq, it.Event.Txn, txn)
			}
			pendingTxn = it.Event.Txn
			if it.Watermark.LowerNs != wm.LowerNs || it.Watermark.UpperNs != wm.UpperNs {
				t.Fatalf("seq %d: reported watermark %+v, want %+v", it.Seq, it.Watermark, wm)
			}
			if prev, ok := lastPerDrone[r.RoutingKey]; ok && r.EventTime <= prev {
				t.Fatalf("seq %d: drone %s out of order: time %d after %d", it.Seq, r.RoutingKey, r.EventTime, prev)
			}
			lastPerDrone[r.RoutingKey] = r.EventTime
			if !r.Flags.Has(localstream.FlagLate) && r.EventTime < maxLower {
				t.Fatalf("seq %d: event time %d is below an earlier commit's watermark lower %d", it.Seq, r.EventTime, maxLower)
			}
		}
	}
	_ = pendingTxn
	for p := range local {
		if _, ok := seen[p]; !ok {
			t.Fatalf("local event %s never reached the centre (%d of %d did)", p, len(seen), len(local))
		}
	}
	if len(lowers) > 0 && lowers[len(lowers)-1] == 0 && len(local) > 0 {
		t.Fatalf("last commit has no watermark")
	}
	return events, commits, markers
}
