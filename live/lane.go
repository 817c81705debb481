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

	// ensured is the connection the EDGELIVE stream was last checked on
	// and ensuredGen its reconnect count then (nats.go reconnects on the
	// same Conn: a centre back without the stream is only found by a new
	// check); nil after a publish failed. ensureAt is when a check was
	// last tried. js is the JetStream context of jsConn. All are Run's
	// goroutine's only.
	ensured    *nats.Conn
	ensuredGen uint64
	ensureAt   time.Time
	js         jetstream.JetStream
	jsConn     *nats.Conn

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

	// sent and bytes count values the centre acknowledged, pubErrs
	// publishes that failed or were not acknowledged.
	sent, bytes, pubErrs, tooLarge atomic.Uint64
	lastSentNs                     atomic.Int64
	// stalledNs is when a value due first could not be sent (the centre
	// unreachable, EDGELIVE not checked, a publish refused) since the
	// stream's last acknowledged value; 0 while it delivers or nothing
	// waits.
	stalledNs atomic.Int64
}

// stall records that a value of s is due and cannot be sent at t; the
// first such moment since the last acknowledged value stays.
func (s *streamLane) stall(t time.Time) { s.stalledNs.CompareAndSwap(0, t.UnixNano()) }

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
// is reachable and holds the EDGELIVE stream. A value counts as sent when
// the centre acknowledged it; one that is not stays due and goes again
// (its drone's newest value then) once the stream is checked again.
func (l *Lane) sendDue(ctx context.Context) error {
	nc := l.opts.Conn()
	if nc == nil || !nc.IsConnected() {
		l.stallDue()
		return nil
	}
	js, err := l.ensure(ctx, nc)
	if js == nil {
		l.stallDue()
		return err
	}
	var out []inflight
	err = l.publishDue(ctx, nc, js, &out)
	if aerr := l.acked(ctx, out); err == nil {
		err = aerr
	}
	return err
}

// stallDue records, for each stream, that its values due cannot be sent
// now; a stream with nothing waiting is not stalled (its drones' last
// values are at the centre, or were released).
func (l *Lane) stallDue() {
	now := l.opts.Now()
	for _, s := range l.streams {
		waiting := false
		for _, sl := range s.f.pending(s.sentVersion, s.sentAt) {
			if now.Sub(s.sentAt[sl.v.drone]) >= s.cfg.Interval {
				waiting = true
				break
			}
		}
		if !waiting {
			s.stalledNs.Store(0)
			continue
		}
		s.stall(now)
	}
}

// inflight is a value published and not yet acknowledged.
type inflight struct {
	s       *streamLane
	drone   string
	version uint64
	n       int       // its bytes on the link
	at      time.Time // when it was due
	ack     jetstream.PubAckFuture
}

// publishDue publishes the values due, appending each to out.
func (l *Lane) publishDue(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, out *[]inflight) error {
	for _, s := range l.streams {
		due := s.f.pending(s.sentVersion, s.sentAt)
		if len(due) == 0 {
			s.stalledNs.Store(0) // nothing waits
		}
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
			m.Header.Set(jetstream.ExpectedStreamHeader, StreamName)
			n := wireSize(m) + ackReplySize(nc)
			if err := l.wait(ctx, n); err != nil {
				return nil // ctx ended
			}
			if !nc.IsConnected() {
				s.stall(now)
				return nil // the link dropped meanwhile: the value stays due
			}
			// Stamped when it leaves, after the wait for the uplink.
			m.Header.Set(hdrSentTime, fmt.Sprint(l.opts.Now().UnixNano()))
			f, err := js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0))
			if err != nil {
				s.pubErrs.Add(1)
				s.stall(now)
				l.ensured = nil
				return fmt.Errorf("live: publish %s: %w", m.Subject, err)
			}
			*out = append(*out, inflight{s: s, drone: sl.v.drone, version: sl.version, n: n, at: now, ack: f})
		}
	}
	return nil
}

// acked waits for the acknowledgements of out (each bounded by ackTimeout)
// and counts the values acknowledged as sent. A value not acknowledged
// stays due, and the stream is checked again before the next publish (a
// centre that lost EDGELIVE answers "no responders"). Once every stream
// delivers, the lane's last error is past and cleared.
func (l *Lane) acked(ctx context.Context, out []inflight) error {
	if len(out) == 0 {
		return nil
	}
	var first error
	for _, f := range out {
		var err error
		select {
		case <-f.ack.Ok():
		case err = <-f.ack.Err():
		case <-ctx.Done():
			return nil
		}
		if err != nil {
			f.s.pubErrs.Add(1)
			f.s.stall(f.at)
			l.ensured = nil
			if first == nil {
				first = fmt.Errorf("live: publish %s: %w", f.ack.Msg().Subject, err)
			}
			continue
		}
		s := f.s
		if f.version > s.sentVersion[f.drone] {
			s.sentVersion[f.drone], s.sentAt[f.drone] = f.version, f.at
		}
		s.sent.Add(1)
		s.bytes.Add(uint64(f.n))
		s.lastSentNs.Store(f.at.UnixNano())
		s.stalledNs.Store(0)
	}
	if first == nil && !l.stalled() {
		l.mu.Lock()
		l.lastErr = ""
		l.mu.Unlock()
	}
	return first
}

// stalled reports whether a stream has values due that it cannot send.
func (l *Lane) stalled() bool {
	for _, s := range l.streams {
		if s.stalledNs.Load() != 0 {
			return true
		}
	}
	return false
}

// ackTimeout bounds the wait for a value's acknowledgement.
const ackTimeout = 5 * time.Second

// ackReplySize is the bytes an acknowledged publish adds to the HPUB line:
// the reply subject of nats.go's asynchronous JetStream publish (the
// connection's inbox prefix, six characters, a dot and six more: its
// jetstream.registerPAF) and its space.
func ackReplySize(nc *nats.Conn) int {
	prefix := nats.InboxPrefix
	if p := nc.Opts.InboxPrefix; p != "" {
		prefix = p + "."
	}
	return len(prefix) + 6 + 1 + 6 + 1
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

// ensure returns the JetStream context to publish values with once the
// EDGELIVE stream is checked (created or updated) on nc since its last
// reconnect: a centre that comes back without the stream (restored, or
// another server behind the URL) gets it again. A failed check, and a
// failed publish, make the next check wait a second from the last one;
// until a check succeeds nothing is sent (nil, and the check's error).
func (l *Lane) ensure(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	gen := nc.Stats().Reconnects
	if l.ensured == nc && l.ensuredGen == gen {
		return l.js, nil
	}
	now := l.opts.Now()
	if now.Sub(l.ensureAt) < time.Second {
		return nil, nil
	}
	l.ensureAt = now
	if l.jsConn != nc {
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(ackTimeout))
		if err != nil {
			return nil, err
		}
		l.js, l.jsConn = js, nc
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := l.js.CreateOrUpdateStream(cctx, CentralStreamConfig(l.cfg.Replicas)); err != nil {
		l.ensureErrs.Add(1)
		return nil, fmt.Errorf("live: create stream %s: %w", StreamName, err)
	}
	l.ensured, l.ensuredGen = nc, gen
	return l.js, nil
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
