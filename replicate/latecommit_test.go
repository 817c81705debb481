package replicate

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// memSink is a Sink on an in-memory model of JetStream's rules: a
// transaction lands whole or not at all, only when the last commit is the
// one it expects; a held commit times out for its sender and lands later,
// just before the next commit arrives (a pending proposal, a stalled
// connection). It is the timing a real server cannot be made to show on
// demand.
type memSink struct {
	mu      sync.Mutex
	commits []Committed
	// holdNext makes the next commit time out and land late.
	holdNext bool
	held     *memCommit
	landed   int
}

type memCommit struct {
	expect uint64
	rec    wire.CommitRecord
}

func (s *memSink) Prepare(context.Context, string) error { return nil }

func (s *memSink) Limits() Limits { return DefaultLimits() }

func (s *memSink) LastCommitted(context.Context, string) (Committed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastLocked(), nil
}

func (s *memSink) lastLocked() Committed {
	if len(s.commits) == 0 {
		return Committed{}
	}
	return s.commits[len(s.commits)-1]
}

// applyLocked lands c when its expectation holds. Lock should be held.
func (s *memSink) applyLocked(c memCommit) (Committed, bool) {
	if s.lastLocked().Seq != c.expect {
		return Committed{}, false
	}
	out := Committed{Seq: uint64(len(s.commits) + 1), Record: c.rec}
	s.commits = append(s.commits, out)
	return out, true
}

func (s *memSink) Begin(stream string, number uint64) Txn {
	return &memTxn{sink: s, stream: stream, number: number}
}

type memTxn struct {
	sink   *memSink
	stream string
	number uint64
	n      int
	bytes  int64
}

func (t *memTxn) Add(_ context.Context, rec localstream.Record) error {
	t.n++
	t.bytes += int64(len(rec.Payload))
	return nil
}

func (t *memTxn) Commit(ctx context.Context, prev Committed, cut localstream.StreamCut, wm watermark.Watermark, meta wire.CommitMeta) (Committed, error) {
	c := memCommit{expect: prev.Seq, rec: wire.NewCommitRecord("a1", t.stream, "i", t.number, cut, wm, meta, t.n, t.bytes, time.Now().UnixNano())}
	s := t.sink
	s.mu.Lock()
	if s.held != nil {
		// The late commit lands just before this one arrives.
		if _, ok := s.applyLocked(*s.held); ok {
			s.landed++
		}
		s.held = nil
	}
	if s.holdNext {
		s.holdNext, s.held = false, &c
		s.mu.Unlock()
		<-ctx.Done()
		return Committed{}, ctx.Err()
	}
	defer s.mu.Unlock()
	out, ok := s.applyLocked(c)
	if !ok {
		return Committed{}, &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence"}
	}
	return out, nil
}

func (t *memTxn) AddMarker(_ context.Context, _ localstream.Record, _ string) error {
	t.n++
	return nil
}

func (t *memTxn) Discard()       {}
func (t *memTxn) Len() int       { return t.n }
func (t *memTxn) Bytes() int64   { return t.bytes }
func (t *memTxn) Number() uint64 { return t.number }

// TestLateCommitKeepsWatermarkMonotone (issue 11 case 3): a commit times
// out, the replicator re-reads the centre and rebuilds a transaction
// while the tracker gives a smaller watermark (as a tracker rewound by a
// rebuilt smaller transaction does); the timed-out commit lands late, just
// before the rebuilt one. Every record of the chain must still carry a
// watermark at least its predecessor's.
func TestLateCommitKeepsWatermarkMonotone(t *testing.T) {
	store, st := openStore(t, t.TempDir())
	defer store.Close()
	sink := &memSink{}
	var mu sync.Mutex
	calls := 0
	// A tracker rewound by a rebuilt, smaller transaction: right after a
	// late commit landed, it answers from its older state (the watermark
	// of a cut 8 events back), as watermark.Tracker does after the
	// rebuilt transaction's smaller cut; otherwise the time of the last
	// event before the cut.
	events := map[localstream.Position]int64{}
	seenLanded := 0
	wmf := func(cut localstream.StreamCut) (watermark.Watermark, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		var times []int64
		for p, et := range events {
			if in, err := st.Topology().Contains(cut, p); err == nil && in {
				times = append(times, et)
			}
		}
		slices.Sort(times)
		sink.mu.Lock()
		landed := sink.landed
		sink.mu.Unlock()
		back := 1
		if landed > seenLanded {
			seenLanded, back = landed, 8
		}
		var lower int64
		if len(times) >= back {
			lower = times[len(times)-back]
		}
		return watermark.Watermark{LowerNs: lower, UpperNs: lower, Cut: cut}, nil
	}
	r := NewReplicator(st, sink, "i", ReplicatorConfig{CommitTimeout: 200 * time.Millisecond, IdleCommitInterval: 50 * time.Millisecond,
		Watermark: wmf, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	base := time.Now().UnixNano()
	appendN := func(n int) {
		for range n {
			ev := localstream.Event{RoutingKey: "d1", Writer: "w/d1", EventTime: base + int64(len(events))*1_000_000, Payload: []byte("x")}
			pos, err := st.Append(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			events[pos] = ev.EventTime
			mu.Unlock()
		}
	}
	for round := range 6 {
		appendN(5)
		testkit.WaitFor(t, 10*time.Second, "a commit", func() bool { return r.Stats().Txns > uint64(round*2) })
		sink.mu.Lock()
		sink.holdNext = true
		sink.mu.Unlock()
		appendN(5)
		testkit.WaitFor(t, 10*time.Second, "the late commit to land", func() bool {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return sink.landed > round
		})
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.landed == 0 {
		t.Fatal("the fault did not happen: no commit landed late")
	}
	for i := 1; i < len(sink.commits); i++ {
		a, b := sink.commits[i-1].Record.Watermark, sink.commits[i].Record.Watermark
		if b.LowerNs < a.LowerNs || b.UpperNs < a.UpperNs {
			t.Fatalf("commit %d (txn %d) carries watermark (%d, %d) after (%d, %d): moved back", i+1, sink.commits[i].Record.Txn, b.LowerNs, b.UpperNs, a.LowerNs, a.UpperNs)
		}
	}
	t.Logf("%d commits, %d landed late, watermark calls %d", len(sink.commits), sink.landed, calls)
}
