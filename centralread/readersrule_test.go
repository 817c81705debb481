package centralread

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// TestReadersRuleUnderResets (issue 41, the reader's rule): a read that
// does not follow returns every item up to the last sequence the stream
// held when it started, or an error — never a silent prefix — while three
// agents write, its ordered consumer is deleted under it again and again
// (each deletion a reset, and the fetch in flight comes back empty) and
// its link to the server is cut. Each read is compared with a reference
// read made after the writers stopped, with no faults.
func TestReadersRuleUnderResets(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 41))
	srv := rigs.StartCentral(t, central.Config{})
	px := testkit.NewProxy(t, srv.ClientURL()[len("nats://"):], testkit.ProxyHooks{})
	direct := connect(t, srv.ClientURL())
	reader := connect(t, "nats://"+px.Addr())

	// Three agents write telemetry until stopped, in layout 1 (a message
	// per event: reads long enough for resets to land inside them).
	writing, stopWriting := context.WithCancel(context.Background())
	var writers sync.WaitGroup
	for a := range 3 {
		_, st := rigs.OpenStream(t, t.TempDir(), localstream.Options{}, "telemetry", localstream.StreamConfig{})
		rp := startReplica(t, direct, st, fmt.Sprintf("agent-%d", a), replicate.ReplicatorConfig{CommitInterval: 10 * time.Millisecond}, replicate.JetStreamOptions{Layout: 1})
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := 0; writing.Err() == nil; i++ {
				ev := localstream.Event{RoutingKey: fmt.Sprintf("d%d", i%4), Writer: "t", EventTime: time.Now().UnixNano(),
					ContentType: "application/json", Payload: fmt.Appendf(nil, `{"i":%d}`, i)}
				if _, err := st.Append(writing, ev); err != nil {
					return
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
		t.Cleanup(func() { rp.close() })
	}
	js, err := jetstream.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 2*time.Minute)
	testkit.WaitFor(t, 20*time.Second, "commits at the centre", func() bool {
		s, err := js.Stream(ctx, wire.StreamName("telemetry"))
		return err == nil && s.CachedInfo().State.Msgs > 3000
	})

	// Faults: delete the reader's ordered consumer (a reset; the fetch in
	// flight comes back empty), now and then cut its link.
	var deleted, cuts atomic.Int64
	faulting, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		frng := rand.New(rand.NewPCG(rng.Uint64(), 1))
		for i := 0; faulting.Err() == nil; i++ {
			time.Sleep(time.Duration(30+frng.IntN(90)) * time.Millisecond)
			if i%12 == 0 {
				px.Cut()
				cuts.Add(1)
				continue
			}
			st, err := js.Stream(faulting, wire.StreamName("telemetry"))
			if err != nil {
				continue
			}
			for name := range st.ConsumerNames(faulting).Name() {
				// Only the reader's: it filters every agent ("*").
				if ci, err := st.Consumer(faulting, name); err == nil && slices.Contains(ci.CachedInfo().Config.FilterSubjects, "edge.telemetry.*.cut") {
					if st.DeleteConsumer(faulting, name) == nil {
						deleted.Add(1)
					}
				}
			}
		}
	}()

	// Each read starts 2,000 sequences before the stream's end: reads of
	// one length while the stream grows.
	type read struct {
		from, atStart uint64
		items         []string
	}
	var reads []read
	failed := 0
	for range testkit.Rounds(6) {
		s, err := js.Stream(ctx, wire.StreamName("telemetry"))
		if err != nil {
			t.Fatal(err)
		}
		atStart := s.CachedInfo().State.LastSeq
		from := atStart - 2000
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		items, err := ReadAll(rctx, reader, "telemetry", ReadOptions{StartSeq: from})
		cancel()
		if err != nil {
			failed++ // an error is allowed; a short read is not
			t.Logf("a read failed (allowed): %v", err)
			continue
		}
		reads = append(reads, read{from, atStart, itemKeys(items)})
	}
	stopFaults()
	<-faultsDone
	stopWriting()
	writers.Wait()
	if deleted.Load() == 0 || cuts.Load() == 0 {
		t.Fatalf("the faults did not happen: %d consumers deleted, %d link cuts", deleted.Load(), cuts.Load())
	}
	ref, err := ReadAll(ctx, direct, "telemetry", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refKeys := itemKeys(ref)
	for i, r := range reads {
		first := 0
		for first < len(ref) && ref[first].Seq < r.from {
			first++
		}
		end := first
		for end < len(ref) && ref[end].Seq <= r.atStart {
			end++
		}
		wantKeys, want := refKeys[first:end], end-first
		if len(r.items) < want || !slices.Equal(r.items[:want], wantKeys) {
			got := 0
			for got < len(r.items) && got < want && r.items[got] == wantKeys[got] {
				got++
			}
			t.Fatalf("read %d ended early or differs: %d of %d items up to seq %d match (it returned %d; %d consumers deleted, %d link cuts so far)",
				i, got, want, r.atStart, len(r.items), deleted.Load(), cuts.Load())
		}
	}
	if len(reads) == 0 {
		t.Fatalf("every read failed (%d)", failed)
	}
	t.Logf("%d reads whole up to their start (%d failed with an error); %d ordered consumers deleted under them, %d link cuts; %d items at the end",
		len(reads), failed, deleted.Load(), cuts.Load(), len(ref))
}

// itemKeys names each item by its sequence, kind and position, in order.
func itemKeys(items []Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = fmt.Sprint(it.Seq, it.Kind, it.Agent, it.Event.Record.Position, it.Commit.Txn)
	}
	return out
}

// TestFollowSurvivesConsumerLoss: a following reader whose ordered
// consumer is deleted while it waits for new messages (as when the
// server holding that consumer restarts) makes a new one from where it
// was and returns the next event, instead of ending with the loss.
//
// Failed before: "Next after its consumer was deleted: nats: consumer deleted".
func TestFollowSurvivesConsumerLoss(t *testing.T) {
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	_, st := rigs.OpenStream(t, t.TempDir(), localstream.Options{}, "telemetry", localstream.StreamConfig{})
	rp := startReplica(t, nc, st, "agent-f", replicate.ReplicatorConfig{CommitInterval: 10 * time.Millisecond}, replicate.JetStreamOptions{})
	ctx := testCtx(t, 30*time.Second)
	add := func(i int) {
		if _, err := st.Append(ctx, localstream.Event{RoutingKey: "d1", Writer: "t", EventTime: int64(i + 1), ContentType: "application/json",
			Payload: fmt.Appendf(nil, `{"i":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	add(0)
	testkit.WaitFor(t, 10*time.Second, "the first event at the centre", func() bool { return rp.r.Stats().BacklogEvents == 0 && rp.r.Stats().Txns > 0 })
	r, err := NewCentralReader(ctx, nc, "telemetry", ReadOptions{Follow: true, PollWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if it, err := r.Next(ctx); err != nil || it.Kind != ItemEvent {
		t.Fatalf("first item: %v %v", it.Kind, err)
	}
	if it, err := r.Next(ctx); err != nil || it.Kind != ItemCommit {
		t.Fatalf("second item: %v %v", it.Kind, err)
	}
	type next struct {
		it  Item
		err error
	}
	got := make(chan next, 1)
	go func() { it, err := r.Next(ctx); got <- next{it, err} }() // waits in a fetch
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, wire.StreamName("telemetry"))
	if err != nil {
		t.Fatal(err)
	}
	// Delete every consumer the reader makes for 500 ms: the one its
	// waiting fetch pulls from among them.
	deleted := 0
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for name := range s.ConsumerNames(ctx).Name() {
			if s.DeleteConsumer(ctx, name) == nil {
				deleted++
			}
		}
	}
	if deleted == 0 {
		t.Fatal("the fault did not happen: no consumer deleted")
	}
	add(1)
	n := <-got
	if n.err != nil || n.it.Kind != ItemEvent || string(n.it.Event.Record.Payload) != `{"i":1}` {
		t.Fatalf("Next after its consumer was deleted: %v (item %v %q)", n.err, n.it.Kind, n.it.Event.Record.Payload)
	}
}
