package unpack

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// TestUnpackLiveAgents: two agents replicate (layout 2) while an
// unpacker runs; the derived stream ends with every source event once,
// in the source's order, per drone 1..n.
func TestUnpackLiveAgents(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	agents := []*testAgent{newTestAgent(t, "gs.1", 3), newTestAgent(t, "gs-2", 2)}
	f := runFleet(t, agents, func(*testAgent) *nats.Conn { return connect(t, srv.ClientURL()) }, replicate.JetStreamOptions{}, 2*time.Millisecond)
	u, _ := startUnpacker(t, nc, Options{})
	// The unpacker republishes while the agents append.
	testkit.WaitFor(t, 60*time.Second, "1,000 events unpacked while the agents append", func() bool { return derivedLast(nc, testStream) >= 1000 })
	want := f.stop(t, 30*time.Second)
	src := len(waitSource(t, nc, testStream, total(agents...)))
	testkit.WaitFor(t, 30*time.Second, "the unpacker to catch up", func() bool { return derivedLast(nc, testStream) == uint64(src) })
	n := verifyDerived(t, nc, testStream, want)
	st := u.Stats()
	t.Logf("%d events; stats %+v", n, st)
	if st.Events != uint64(n) || st.Corrupt != 0 || st.Oversize != 0 || st.Fenced != 0 {
		t.Fatalf("stats %+v for %d events", st, n)
	}
	checkStarts(t, nc, 1)
}

// checkStarts: for a time cut in the middle of the run, every non-late
// event with time ≤ T is before StartSeq, and EventsStartSeq is the
// first derived message from StartSeq on (in each of n partitions).
func checkStarts(t *testing.T, nc *nats.Conn, n int) {
	t.Helper()
	src := sourceEvents(t, nc, testStream)
	// T: the earliest of the agents' median event times (each agent's
	// clock base is its own), so that every agent's cut completes.
	byAgent := map[string][]int64{}
	for _, ev := range src {
		byAgent[ev.Agent] = append(byAgent[ev.Agent], ev.Record.EventTime)
	}
	at := int64(math.MaxInt64)
	for _, ts := range byAgent {
		at = min(at, ts[len(ts)/2])
	}
	cut, err := centralread.CutAt(context.Background(), nc, at, centralread.TimeCutOptions{Streams: []string{testStream}})
	if err != nil || !cut.Complete {
		t.Fatalf("cut at the middle: %+v %v", cut, err)
	}
	starts, err := Starts(context.Background(), nc, cut)
	if err != nil || len(starts) != 1 || !starts[0].Complete || starts[0].StartSeq == 0 {
		t.Fatalf("starts %+v %v", starts, err)
	}
	s := starts[0]
	eventsStart := []uint64{s.EventsStartSeq}
	if n > 1 {
		eventsStart = nil
		for i, p := range s.Partitions {
			if p.Derived != Partitions(testStream, n)[i].StreamName() {
				t.Fatalf("starts %+v: partition %d is %s", s, i, p.Derived)
			}
			eventsStart = append(eventsStart, p.EventsStartSeq)
		}
	}
	if len(eventsStart) != n || slices.Contains(eventsStart, 0) {
		t.Fatalf("starts %+v: events start %v in %d partitions", s, eventsStart, n)
	}
	for _, ev := range src {
		if ev.Record.EventTime <= at && !ev.Record.Flags.Has(localstream.FlagLate) && ev.Seq >= s.StartSeq {
			t.Fatalf("event at %d ≤ T in source seq %d, not before start %d", ev.Record.EventTime, ev.Seq, s.StartSeq)
		}
	}
	for _, p := range Partitions(testStream, n) {
		der, seqs, _ := readDerived(t, nc, p)
		for i, d := range der {
			if (d.Seq >= s.StartSeq) != (seqs[i] >= eventsStart[p.Index]) {
				t.Fatalf("%s seq %d (source %d) on the wrong side of events start %d (source start %d)", p, seqs[i], d.Seq, eventsStart[p.Index], s.StartSeq)
			}
		}
	}
	t.Logf("cut at the middle: start seq %d, events start seqs %v", s.StartSeq, eventsStart)
}

// TestLayoutOneNothingChanges: a stream written in layout 1 has no
// packs; the unpacker reads its commit records, republishes nothing and
// creates no derived stream.
func TestLayoutOneNothingChanges(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	a := newTestAgent(t, "gs-1", 2)
	for range 20 {
		if err := a.appendRound(); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{Layout: 1})
	a.waitReplicated(t, r, 30*time.Second)
	u, stop := startUnpacker(t, nc, Options{})
	// The replicator's last message is a commit record: the unpacker has
	// read every one when it has read that.
	js, _ := jetstream.New(nc)
	src, err := js.Stream(context.Background(), wire.StreamName(testStream))
	if err != nil {
		t.Fatal(err)
	}
	last := src.CachedInfo().State.LastSeq
	testkit.WaitFor(t, 30*time.Second, "the unpacker to read every commit record", func() bool { return u.Stats().SourceSeq >= last })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(context.Background(), DerivedStreamName(testStream)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("derived stream for a layout-1 stream: %v", err)
	}
	if st := u.Stats(); st.Events != 0 || st.Corrupt != 0 {
		t.Fatalf("stats %+v", st)
	}
	waitSource(t, nc, testStream, 40)
}

// TestActiveStandbyPair: two unpackers of one stream at once; one is
// fenced and stands by (counted), the stream is still every event once,
// and when the active one stops, the standby takes over.
func TestActiveStandbyPair(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	a := newTestAgent(t, "gs-1", 3)
	r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx, 2*time.Millisecond) }()
	opts := Options{StandbyCheck: 200 * time.Millisecond}
	u1, stop1 := startUnpacker(t, connect(t, srv.ClientURL()), opts)
	// The second starts once the first writes: it reads a cursor and
	// publishes while the first does (not fenced by the stream's creation).
	testkit.WaitFor(t, 30*time.Second, "the first to write", func() bool { return derivedLast(nc, testStream) > 0 })
	u2, stop2 := startUnpacker(t, connect(t, srv.ClientURL()), opts)
	testkit.WaitFor(t, 30*time.Second, "one of the pair fenced", func() bool { return u1.Stats().Fenced+u2.Stats().Fenced > 0 })
	// Stop whichever is active now; the other must finish the work.
	active, stopActive, other := u1, stop1, u2
	if u1.Stats().State == StateStandby {
		active, stopActive, other = u2, stop2, u1
	}
	took := other.Stats().Events
	if err := stopActive(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the standby to take over while the agent appends", func() bool { return other.Stats().Events > took })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.waitReplicated(t, r, 30*time.Second)
	src := len(waitSource(t, nc, testStream, total(a)))
	testkit.WaitFor(t, 30*time.Second, "the standby to take over and catch up", func() bool { return derivedLast(nc, testStream) == uint64(src) })
	n := verifyDerived(t, nc, testStream, map[string]map[string]int{a.id: a.counts()})
	t.Logf("%d events; stopped %+v; took over %+v", n, active.Stats(), other.Stats())
	if other.Stats().Events == 0 {
		t.Fatal("the standby never published")
	}
}

// TestOldDerivedStreamGoesOn: a derived stream made by an earlier
// unpacker (allow_atomic, as it made them; events already in it, written
// with an ack for every message) is taken as it is: the unpacker goes on
// behind what it holds, every event once.
func TestOldDerivedStreamGoesOn(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	a := newTestAgent(t, "gs-1", 2)
	r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx, 2*time.Millisecond) }()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: DerivedStreamName(testStream),
		Subjects: []string{DerivedSubjects(testStream)}, Storage: jetstream.FileStorage, AllowDirect: true, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	// The old unpacker: an ack for every message.
	_, stopOld := startUnpacker(t, connect(t, srv.ClientURL()), Options{MaxPending: 1})
	testkit.WaitFor(t, 30*time.Second, "the old unpacker to write", func() bool { return derivedLast(nc, testStream) > 20 })
	if err := stopOld(); err != nil {
		t.Fatal(err)
	}
	u, _ := startUnpacker(t, connect(t, srv.ClientURL()), Options{})
	testkit.WaitFor(t, 30*time.Second, "the new unpacker to write behind the old one while the agent appends", func() bool { return u.Stats().Events > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.waitReplicated(t, r, 30*time.Second)
	src := len(waitSource(t, nc, testStream, total(a)))
	testkit.WaitFor(t, 30*time.Second, "the unpacker to catch up", func() bool { return derivedLast(nc, testStream) == uint64(src) })
	verifyDerived(t, nc, testStream, map[string]map[string]int{a.id: a.counts()})
	if u.Stats().Events == 0 {
		t.Fatalf("%d events by the new unpacker", u.Stats().Events)
	}
}
