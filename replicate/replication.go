package replicate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// NewInstanceID returns a random id for one run of the agent; the sink
// writes it into commit records and the replicators tell their own
// commits by it.
func NewInstanceID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ReplicationConfig configures the replication of all local streams.
type ReplicationConfig struct {
	// Instance must be the instance id the sink writes. Required.
	Instance string
	// Template is the per-stream configuration (Priority, Watermark and
	// Uplink are set per stream below).
	Template ReplicatorConfig
	// Priorities overrides DefaultPriority per stream name.
	Priorities map[string]int
	// UplinkBytesPerSec caps all streams together (≤ 0: unlimited).
	UplinkBytesPerSec int64
	// Uplink, when set, is the cap to share instead of a new one of
	// UplinkBytesPerSec: another sender on the same link (the live lane,
	// package live) draws from it too, at a priority of its own.
	Uplink *Uplink
	// Watermarks gives a stream's committed-watermark function (nil or a
	// nil result: no watermark).
	Watermarks func(stream string) CommittedWatermarkFunc
	// Repeats gives a stream's RepeatFunc (nil or a nil result: every
	// event is sent; repeats.go): set for the streams whose intake marks
	// redeliveries.
	Repeats func(stream string) RepeatFunc
	// Streams names the streams to replicate. Default (nil): every
	// stream of the store, including streams created later.
	Streams []string
	// DiscoverInterval is how often streams created later are picked up.
	// Default 1 s.
	DiscoverInterval time.Duration
	// Logger logs state changes. Default slog.Default().
	Logger *slog.Logger
}

// Replication runs one Replicator per local stream, sharing one uplink
// cap in priority order. A stream stopped by a permanent error does not
// stop the others. New starts nothing; Run blocks until its ctx ends and
// has then joined every replicator (the one way to stop); Stats and
// WaitCaughtUp are safe for concurrent use.
type Replication struct {
	store  *localstream.Store
	sink   Sink
	cfg    ReplicationConfig
	uplink *Uplink
	// discovered is closed once Run has started the streams there were.
	discovered chan struct{}

	mu sync.Mutex
	// reps are the replicators by stream. Guarded by mu.
	reps map[string]*Replicator
}

// NewReplication returns the replication of store's streams into sink.
func NewReplication(store *localstream.Store, sink Sink, cfg ReplicationConfig) *Replication {
	if cfg.DiscoverInterval <= 0 {
		cfg.DiscoverInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	up := cfg.Uplink
	if up == nil {
		up = NewUplink(cfg.UplinkBytesPerSec)
	}
	return &Replication{store: store, sink: sink, cfg: cfg, uplink: up,
		reps: map[string]*Replicator{}, discovered: make(chan struct{})}
}

// Run replicates every stream (and streams created later) until ctx ends,
// then returns nil once every replicator has stopped.
func (r *Replication) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(r.cfg.DiscoverInterval)
	defer t.Stop()
	for first := true; ; first = false {
		r.discover(ctx, &wg)
		if first {
			select {
			case <-r.discovered: // an earlier Run
			default:
				close(r.discovered)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// discover starts a replicator for every stream without one.
func (r *Replication) discover(ctx context.Context, wg *sync.WaitGroup) {
	for _, st := range r.store.Streams() {
		r.mu.Lock()
		_, have := r.reps[st.Name()]
		r.mu.Unlock()
		if have || r.cfg.Streams != nil && !slices.Contains(r.cfg.Streams, st.Name()) {
			continue
		}
		cfg := r.cfg.Template
		p := DefaultPriority(st.Name())
		if v, ok := r.cfg.Priorities[st.Name()]; ok {
			p = v
		}
		cfg.Priority = &p
		cfg.Uplink = r.uplink
		if cfg.Logger == nil {
			cfg.Logger = r.cfg.Logger
		}
		if r.cfg.Watermarks != nil {
			cfg.Watermark = r.cfg.Watermarks(st.Name())
		}
		if r.cfg.Repeats != nil {
			cfg.Repeat = r.cfg.Repeats(st.Name())
		}
		rep := NewReplicator(st, r.sink, r.cfg.Instance, cfg)
		r.mu.Lock()
		r.reps[st.Name()] = rep
		r.mu.Unlock()
		wg.Go(func() {
			rep.Run(ctx) // a permanent error is logged and kept in rep.Stats
		})
	}
}

// Stats returns every stream's snapshot, in priority order.
func (r *Replication) Stats() []StreamStats {
	r.mu.Lock()
	reps := make([]*Replicator, 0, len(r.reps))
	for _, rep := range r.reps {
		reps = append(reps, rep)
	}
	r.mu.Unlock()
	out := make([]StreamStats, 0, len(reps))
	for _, rep := range reps {
		out = append(out, rep.Stats())
	}
	slices.SortFunc(out, func(a, b StreamStats) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		if a.Stream < b.Stream {
			return -1
		}
		return 1
	})
	return out
}

// WaitCaughtUp blocks until every replicating stream has committed what
// was durable locally when it was called (the final commit of a graceful
// shutdown: stop the intake, then WaitCaughtUp with a deadline, then
// cancel Run), or ctx ends. Streams stopped by a permanent error are
// skipped. It waits for Run to have started the streams first.
func (r *Replication) WaitCaughtUp(ctx context.Context) error {
	select {
	case <-r.discovered:
	case <-ctx.Done():
		return fmt.Errorf("replicate: replication not started: %w", ctx.Err())
	}
	r.mu.Lock()
	reps := make([]*Replicator, 0, len(r.reps))
	for _, rep := range r.reps {
		reps = append(reps, rep)
	}
	r.mu.Unlock()
	for _, rep := range reps {
		if err := rep.WaitCaughtUp(ctx); err != nil {
			return err
		}
	}
	return nil
}

// WaitCaughtUp blocks until the central cut (before the first commit: the
// head, as for the backlog in Stats) covers the local tail as of the call,
// the replicator stopped on a permanent error, or ctx ends.
func (r *Replicator) WaitCaughtUp(ctx context.Context) error {
	tail := r.st.TailCut()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		r.mu.Lock()
		last, stopped := r.last, r.stopErr
		r.mu.Unlock()
		if stopped != nil {
			return nil
		}
		cut, ok := r.localCut(last)
		if !ok {
			cut = r.st.HeadCut()
		}
		if le, err := r.st.Topology().LessEq(tail, cut); err == nil && le {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicate: stream %s not caught up: %w", r.st.Name(), ctx.Err())
		case <-t.C:
		}
	}
}
