package centralread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/internal/backoff"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// A time cut answers a central consumer's question "is everything of this
// agent (or of the fleet) up to time T at the centre, across video,
// telemetry and health?" — what per-stream watermarks alone do not say.
//
// A commit record's committed watermark promises: every event of its agent
// and stream after the watermark's cut that is not flagged late has an
// event time of at least lower_ns. So once a commit record of an (agent,
// stream) has lower_ns > T, every non-late event of that agent and stream
// with time ≤ T is before that watermark's cut, and so in a transaction at
// or before that commit record. The time cut at T is, for every (agent,
// stream), the first such commit record: its watermark cut and its stream
// sequence. A consumer that reads each stream up to that sequence (or to
// that commit's cut: `edge-agent read --agent A --to-cut C`) and keeps the
// events with time ≤ T not flagged late has all of them, exactly once — the
// way to run exactly-once windowed analytics on what the agents deliver.
//
// Agents bound event times by their receiving clock (docs/design.md rule 12),
// so lower_ns never passes an agent's clock: a time cut at T completes only
// after T (plus the commit interval), and a stream with no drone follows the
// agent's clock (max_clock_behind behind it), so it completes too.

// DefaultTimeCutStreams are the streams a time cut covers by default.
var DefaultTimeCutStreams = []string{"video", "telemetry", "health"}

// TimeCutOptions select what a time cut covers.
type TimeCutOptions struct {
	// Streams are the local stream names; default DefaultTimeCutStreams.
	Streams []string
	// Agent limits the cut to one agent ("" = every agent that has a
	// commit record in any of the streams).
	Agent string
	// Wait follows the streams until the cut is complete or ctx ends;
	// otherwise the cut is what the centre holds now (maybe incomplete).
	Wait bool
	// PollWait is how long one fetch waits while following. Default 1 s.
	PollWait time.Duration
}

// StreamTimeCut is the time cut of one agent's stream.
type StreamTimeCut struct {
	// Agent and Stream name it.
	Agent  string `json:"agent"`
	Stream string `json:"stream"`
	// Complete is set once a commit record's watermark lower passes T;
	// the fields below are then that first record's.
	Complete bool `json:"complete"`
	// Seq is the commit record's stream sequence in EDGE_<STREAM>, Txn its
	// transaction number, CommitCut its cut (text form, for read --to-cut).
	Seq       uint64 `json:"seq,omitempty"`
	Txn       uint64 `json:"txn,omitempty"`
	CommitCut string `json:"commit_cut,omitempty"`
	// Watermark is its committed watermark: every non-late event with
	// time ≤ T lies before Watermark.Cut.
	Watermark wire.WatermarkJSON `json:"watermark"`
	// LastLowerNs is the highest committed watermark lower seen so far
	// and LastSeq the stream sequence of the last commit record read (for
	// an incomplete cut: how far the stream is).
	LastLowerNs int64  `json:"last_lower_ns"`
	LastSeq     uint64 `json:"last_seq"`
}

// TimeCut is the cut at AtNs across agents and streams.
type TimeCut struct {
	// AtNs is T, Unix ns.
	AtNs int64 `json:"at_ns"`
	// Complete is set when every stream cut is.
	Complete bool `json:"complete"`
	// Streams are the stream cuts, by agent, then stream.
	Streams []StreamTimeCut `json:"streams"`
}

// Get returns the stream cut of agent and stream.
func (c TimeCut) Get(agent, stream string) (StreamTimeCut, bool) {
	for _, s := range c.Streams {
		if s.Agent == agent && s.Stream == stream {
			return s, true
		}
	}
	return StreamTimeCut{}, false
}

// timeCutState gathers the commit records of several streams. Safe for
// concurrent use.
type timeCutState struct {
	at      int64
	streams []string
	mu      sync.Mutex
	agents  map[string]bool
	cuts    map[[2]string]*StreamTimeCut
}

// commit takes one commit record of stream; it reports whether the cut is
// now complete (every known agent, every stream).
func (s *timeCutState) commit(stream string, it Item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agents[it.Agent] = true
	k := [2]string{it.Agent, stream}
	c := s.cuts[k]
	if c == nil {
		c = &StreamTimeCut{Agent: it.Agent, Stream: stream}
		s.cuts[k] = c
	}
	c.LastLowerNs, c.LastSeq = max(c.LastLowerNs, it.Commit.Watermark.LowerNs), it.Seq
	if !c.Complete && it.Commit.Watermark.LowerNs > s.at {
		c.Complete, c.Seq, c.Txn, c.CommitCut, c.Watermark = true, it.Seq, it.Commit.Txn, it.Commit.CutText, it.Commit.Watermark
	}
	return s.completeLocked()
}

func (s *timeCutState) completeLocked() bool {
	if len(s.agents) == 0 {
		return false
	}
	for a := range s.agents {
		for _, st := range s.streams {
			if c := s.cuts[[2]string{a, st}]; c == nil || !c.Complete {
				return false
			}
		}
	}
	return true
}

// result is the cut as gathered.
func (s *timeCutState) result() TimeCut {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := TimeCut{AtNs: s.at, Complete: s.completeLocked()}
	for _, a := range slices.Sorted(maps.Keys(s.agents)) {
		for _, st := range s.streams {
			c := s.cuts[[2]string{a, st}]
			if c == nil {
				c = &StreamTimeCut{Agent: a, Stream: st}
			}
			out.Streams = append(out.Streams, *c)
		}
	}
	return out
}

// CutAt computes the time cut at atNs (Unix ns) from the commit records
// at the centre. With opts.Wait it follows the streams and returns only
// once the cut is complete (or with ctx's error and the cut so far).
func CutAt(ctx context.Context, nc *nats.Conn, atNs int64, opts TimeCutOptions) (TimeCut, error) {
	if len(opts.Streams) == 0 {
		opts.Streams = DefaultTimeCutStreams
	}
	s := &timeCutState{at: atNs, streams: opts.Streams, agents: map[string]bool{}, cuts: map[[2]string]*StreamTimeCut{}}
	if opts.Agent != "" {
		s.agents[opts.Agent] = true
	}
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(gctx)
	for _, stream := range opts.Streams {
		g.Go(func() error {
			err := s.follow(gctx, nc, stream, opts)
			if err == nil && opts.Wait {
				stop() // complete
			}
			return err
		})
	}
	err := g.Wait()
	cut := s.result()
	if cut.Complete || (!opts.Wait && err == nil) {
		return cut, nil
	}
	if ctx.Err() != nil {
		return cut, ctx.Err()
	}
	return cut, err
}

// follow reads stream's commit records into s. Without opts.Wait it
// returns at the end of the stream; with it, once s is complete.
func (s *timeCutState) follow(ctx context.Context, nc *nats.Conn, stream string, opts TimeCutOptions) error {
	ro := ReadOptions{Agent: opts.Agent, CommitsOnly: true, Follow: opts.Wait, PollWait: opts.PollWait}
	var r *CentralReader
	for fails := 1; r == nil; fails++ {
		var err error
		r, err = NewCentralReader(ctx, nc, stream, ro)
		switch {
		case err == nil:
		case errors.Is(err, jetstream.ErrStreamNotFound) && !opts.Wait:
			return nil // nothing replicated yet: incomplete
		case errors.Is(err, jetstream.ErrStreamNotFound):
			// Not created yet: wait for the first agent.
			if err := backoff.Sleep(ctx, 250*time.Millisecond, 5*time.Second, fails); err != nil {
				return err
			}
		default:
			return fmt.Errorf("centralread: time cut of %s: %w", stream, err)
		}
	}
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if opts.Wait && s.complete() {
				return nil
			}
			return err
		}
		if it.Kind == ItemCommit && s.commit(stream, it) && opts.Wait {
			return nil
		}
	}
}

func (s *timeCutState) complete() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completeLocked()
}

// Verify checks c against items — each stream's items at the centre, in
// order, read after c was computed: for every (agent, stream) of c, the
// commit record it names is the first whose watermark lower passes T (an
// incomplete one: none up to LastSeq), and every event of that agent and
// stream with time ≤ T that is not flagged late (nor a gap marker) lies
// before its watermark cut and at or before that commit record. contains
// reports whether position p lies before cut in agent's stream (the
// stream's topology; central positions of a store that never lost data
// equal its local ones). It is the promise a consumer relies on; the tests and the
// demo's verification check it.
func (c TimeCut) Verify(items map[string][]Item, contains func(agent, stream string, cut localstream.StreamCut, p localstream.Position) (bool, error)) error {
	complete := len(c.Streams) > 0
	for _, sc := range c.Streams {
		complete = complete && sc.Complete
		var first *Item
		for i, it := range items[sc.Stream] {
			if it.Agent == sc.Agent && it.Kind == ItemCommit && it.Commit.Watermark.LowerNs > c.AtNs {
				first = &items[sc.Stream][i]
				break
			}
		}
		switch {
		case sc.Complete && first == nil:
			return fmt.Errorf("centralread: time cut at T=%d %s/%s: cut at seq %d, but no commit passes T", c.AtNs, sc.Agent, sc.Stream, sc.Seq)
		case sc.Complete && first.Seq != sc.Seq:
			return fmt.Errorf("centralread: time cut at T=%d %s/%s: cut at seq %d, the first commit passing T is at %d", c.AtNs, sc.Agent, sc.Stream, sc.Seq, first.Seq)
		case !sc.Complete && first != nil && first.Seq <= sc.LastSeq:
			return fmt.Errorf("centralread: time cut at T=%d %s/%s: incomplete after seq %d, but the commit at %d passes T", c.AtNs, sc.Agent, sc.Stream, sc.LastSeq, first.Seq)
		case !sc.Complete:
			continue
		}
		wmCut, err := sc.Watermark.Cut.Cut(sc.Stream)
		if err != nil {
			return err
		}
		for _, it := range items[sc.Stream] {
			if it.Agent != sc.Agent || it.Kind != ItemEvent {
				continue
			}
			r := it.Event.Record
			in, err := contains(sc.Agent, sc.Stream, wmCut, r.Position)
			if err != nil {
				return err
			}
			if in && it.Seq > sc.Seq {
				return fmt.Errorf("centralread: time cut at T=%d %s/%s: event %s inside the watermark cut %s but after its commit (seq %d > %d)",
					c.AtNs, sc.Agent, sc.Stream, r.Position, wmCut, it.Seq, sc.Seq)
			}
			if r.EventTime > c.AtNs || r.Flags.Has(localstream.FlagLate) || r.Flags.Has(localstream.FlagGap) {
				continue
			}
			if !in || it.Seq > sc.Seq {
				return fmt.Errorf("centralread: time cut at T=%d %s/%s: event %s at %d ≤ T, not late, outside the cut %s (seq %d, cut's commit at %d; flags %b)",
					c.AtNs, sc.Agent, sc.Stream, r.Position, r.EventTime, wmCut, it.Seq, sc.Seq, r.Flags)
			}
		}
	}
	if complete != c.Complete {
		return fmt.Errorf("centralread: time cut at T=%d: complete %v, but its streams say %v", c.AtNs, c.Complete, complete)
	}
	return nil
}
