package live

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
)

// Priority is the lane's place on the shared uplink (replicate.Uplink): ahead
// of every stream's backlog (replicate.DefaultPriority is 0 and up).
const Priority = -1

// tick is how often the lane looks for values due.
const tick = 50 * time.Millisecond

// Options are what the lane needs from the agent.
type Options struct {
	// Conn returns the central connection in use (the sink's: it replaces
	// a connection closed for good). Required.
	Conn func() *nats.Conn
	// Uplink is the cap shared with the backlog (replicate.ReplicationConfig's
	// Uplink). The lane draws from it at Priority, and never more than
	// Config.Share of it. Default nil: no cap.
	Uplink *replicate.Uplink
	// Priority orders the lane's streams among themselves (lower first).
	// Default replicate.DefaultPriority.
	Priority func(stream string) int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger logs state changes, never per value. Default slog.Default().
	Logger *slog.Logger
}

// Lane sends each drone's latest value ahead of the backlog (see the
// package doc). New starts nothing; Run blocks until its ctx ends and has
// joined every goroutine it started; Stats is safe for concurrent use.
type Lane struct {
	agent string
	cfg   Config
	opts  Options
	// share bounds the lane's bytes to Config.Share of the uplink cap (nil:
	// no cap); shareChunk is the most drawn at once (its burst).
	share      *rate.Limiter
	shareChunk int
	streams    []*streamLane

	// ensured is the connection the EDGELIVE stream was checked on;
	// ensureAt when that was last tried (Run's goroutine only).
	ensured  *nats.Conn
	ensureAt time.Time

	// ensureErrs counts failed attempts to create the live stream.
	ensureErrs atomic.Uint64
	mu         sync.Mutex
	// lastErr is the latest publish or ensure error. Guarded by mu.
	lastErr string
}

// streamLane is the lane of one local stream.
type streamLane struct {
	name string
	cfg  StreamConfig
	prio int
	f    *follower
	// sentVersion and sentAt are per drone the version last sent and
	// when (Run's goroutine only).
	sentVersion map[string]uint64
	sentAt      map[string]time.Time

	sent, bytes, pubErrs, tooLarge atomic.Uint64
	lastSentNs                     atomic.Int64
}

// New returns the lane of agent over the given local streams; those whose
// Config.Stream is off are left out.
func New(agent string, streams []*localstream.Stream, cfg Config, opts Options) (*Lane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Conn == nil {
		return nil, fmt.Errorf("%w: Options.Conn is required", ErrConfig)
	}
	cfg = cfg.withDefaults()
	if opts.Priority == nil {
		opts.Priority = replicate.DefaultPriority
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Lane{agent: agent, cfg: cfg, opts: opts}
	if capBps := opts.Uplink.BytesPerSec(); capBps > 0 {
		r := max(int64(float64(capBps)*cfg.Share), 1)
		l.shareChunk = int(max(r/20, 512))
		l.share = rate.NewLimiter(rate.Limit(r), l.shareChunk)
	}
	for _, st := range streams {
		sc := cfg.Stream(st.Name())
		if !sc.On() {
			continue
		}
		l.streams = append(l.streams, &streamLane{name: st.Name(), cfg: sc, prio: opts.Priority(st.Name()),
			f:           newFollower(st, sc, cfg.MaxDrones, cfg.Seed, opts.Logger),
			sentVersion: map[string]uint64{}, sentAt: map[string]time.Time{}})
	}
	slices.SortFunc(l.streams, func(a, b *streamLane) int {
		return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(a.name, b.name))
	})
	return l, nil
}

// ShareBytesPerSec is the lane's part of the uplink cap (0: no cap).
func (l *Lane) ShareBytesPerSec() int64 {
	if l.share == nil {
		return 0
	}
	return int64(l.share.Limit())
}

// Run follows the streams and sends their values until ctx ends.
func (l *Lane) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range l.streams {
		wg.Go(func() { s.f.run(ctx) })
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if err := l.sendDue(ctx); err != nil && ctx.Err() == nil {
			l.setErr(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sendDue sends every drone's value that changed since it was last sent
// and whose interval is up, streams in priority order, while the centre
// is reachable.
func (l *Lane) sendDue(ctx context.Context) error {
	nc := l.opts.Conn()
	if nc == nil || !nc.IsConnected() {
		return nil
	}
	if err := l.ensure(ctx, nc); err != nil {
		return err
	}
	for _, s := range l.streams {
		due := s.f.pending(s.sentVersion)
		slices.SortFunc(due, func(a, b slot) int { return cmp.Compare(a.v.drone, b.v.drone) })
		for _, sl := range due {
			now := l.opts.Now()
			if now.Sub(s.sentAt[sl.v.drone]) < s.cfg.Interval {
				continue
			}
			if len(sl.v.payload) > l.cfg.MaxValueBytes {
				s.tooLarge.Add(1)
				s.sentVersion[sl.v.drone] = sl.version
				continue
			}
			m := sl.v.message(l.agent, s.name, now, l.cfg.TTL)
			n := wireSize(m)
			if err := l.wait(ctx, n); err != nil {
				return nil // ctx ended
			}
			if !nc.IsConnected() {
				return nil // the link dropped meanwhile: the value stays due
			}
			// Stamped when it leaves, after the wait for the uplink.
			m.Header.Set(hdrSentTime, fmt.Sprint(l.opts.Now().UnixNano()))
			if err := nc.PublishMsg(m); err != nil {
				s.pubErrs.Add(1)
				return fmt.Errorf("live: publish %s: %w", m.Subject, err)
			}
			s.sentVersion[sl.v.drone], s.sentAt[sl.v.drone] = sl.version, now
			s.sent.Add(1)
			s.bytes.Add(uint64(n))
			s.lastSentNs.Store(now.UnixNano())
		}
	}
	return nil
}

// wait takes n bytes from the shared uplink ahead of the backlog, then
// from the lane's share. The share comes last, just before the publish:
// taken first, a value held up by the uplink (a backlog chunk drawing its
// tokens) kept its share tokens while it waited, and several such values
// then left together, over the share in that second at the link
// (TestLiveShareAtProxy: 27,590 bytes in a second of a 25,000 B/s share).
func (l *Lane) wait(ctx context.Context, n int) error {
	if err := l.opts.Uplink.Wait(ctx, Priority, n); err != nil {
		return err
	}
	if l.share == nil {
		return nil
	}
	for left := n; left > 0; {
		k := min(left, l.shareChunk)
		if err := l.share.WaitN(ctx, k); err != nil {
			return err
		}
		left -= k
	}
	return nil
}

// ensure creates or updates the EDGELIVE stream once per connection
// (retried at most every second after a failure).
func (l *Lane) ensure(ctx context.Context, nc *nats.Conn) error {
	if l.ensured == nc {
		return nil
	}
	now := l.opts.Now()
	if now.Sub(l.ensureAt) < time.Second {
		return nil
	}
	l.ensureAt = now
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(cctx, CentralStreamConfig(l.cfg.Replicas)); err != nil {
		l.ensureErrs.Add(1)
		return fmt.Errorf("live: create stream %s: %w", StreamName, err)
	}
	l.ensured = nc
	return nil
}

// CentralStreamConfig is the EDGELIVE stream's configuration: one message kept
// per subject (a drone's latest value of a stream), per-message TTLs.
func CentralStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: StreamName, Subjects: []string{subjectPrefix + ">"},
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1), MaxMsgsPerSubject: 1,
		Discard: jetstream.DiscardOld, AllowMsgTTL: true,
		Description: "edge-agent live lane: each drone's latest value per stream (a preview, not replicated data)"}
}

func (l *Lane) setErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err.Error()
}
