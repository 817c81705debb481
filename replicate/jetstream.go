package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// JetStreamOptions configure a JetStreamSink.
type JetStreamOptions struct {
	// Replicas of EDGE_<STREAM> when the sink creates it. Default 1.
	Replicas int
	// DuplicateWindow of a created stream. Default 0 = server default
	// (2 min). Exactly-once does not depend on it.
	DuplicateWindow time.Duration
	// RequestTimeout bounds API calls without a deadline. Default 5 s.
	RequestTimeout time.Duration
	// AckFirst waits for the server's ack of a transaction's first message
	// before sending the rest (early rejection, one more round trip).
	// Default false.
	AckFirst bool
	// Layout is the central layout written: 2 (default of this package:
	// a transaction is one message packing its events and commit record)
	// or 1 (one message per event, as before version 2; for consumers
	// that read the subjects directly). Both are read back. The agent
	// chooses per central (agent.CentralConfig.EffectiveLayout).
	Layout int
	// Limits are the server's limits as configured there; zero fields
	// are nats-server's defaults (DefaultLimits). The max payload is
	// always the one the server announces; the batch limits are lowered
	// to what the server's rejections say.
	Limits Limits
	// Now is the clock for commit records. Default time.Now.
	Now func() time.Time
}

// JetStreamSink is the Sink on NATS JetStream with atomic batch publish
// (orbit.go jetstreamext, ADR-50). It is safe for concurrent use.
type JetStreamSink struct {
	link     *link
	agent    string
	instance string
	opts     JetStreamOptions

	// batchSize is the max batch size learned from the server's
	// rejections (0: none yet).
	batchSize atomic.Int64
	// serialUntil (Unix ns) keeps one open batch per stream until then:
	// the server refused a second one.
	serialUntil atomic.Int64

	// hints: stream → *packHint (layout 2: whether its packs compress).
	hints sync.Map

	mu sync.Mutex
	// open counts each stream's batches that have sent a message and are
	// neither committed nor discarded. Guarded by mu.
	open map[string]int
}

// NewJetStreamSink returns the sink of agent on nc. instance should be
// random per process run (it marks the commit records of this run). When
// nc closes for good (a server error nats.go does not recover from), the
// sink dials a new connection with nc's options, and closes that one in
// Close; nc itself stays the caller's.
func NewJetStreamSink(nc *nats.Conn, agent, instance string, opts JetStreamOptions) (*JetStreamSink, error) {
	if agent == "" {
		return nil, fmt.Errorf("%w: agent id is required", ErrConfig)
	}
	if len(wire.EscapeToken(agent)) > wire.MaxTokenBytes {
		return nil, fmt.Errorf("%w: agent id of %d bytes: its subject token is over %d bytes", ErrConfig, len(agent), wire.MaxTokenBytes)
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, err
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch opts.Layout {
	case 0:
		opts.Layout = 2
	case 1, 2:
	default:
		return nil, fmt.Errorf("%w: layout %d (1 or 2)", ErrConfig, opts.Layout)
	}
	l, err := newLink(nc, opts.RequestTimeout)
	if err != nil {
		return nil, err
	}
	return &JetStreamSink{link: l, agent: agent, instance: instance, opts: opts, open: map[string]int{}}, nil
}

// Close stops the sink's watcher and closes the connections it dialed
// (the one it was given is the caller's). It is idempotent.
func (s *JetStreamSink) Close() error {
	s.link.close()
	return nil
}

// Conn is the sink's current connection (for status).
func (s *JetStreamSink) Conn() *nats.Conn { return s.link.conn() }

// ConnectionsReplaced counts closed connections the sink replaced.
func (s *JetStreamSink) ConnectionsReplaced() uint64 { return s.link.replaced.Load() }

// Limits are the server's limits as the sink knows them now: the max
// payload of the current connection's INFO, the configured batch limits
// lowered by the server's rejections.
func (s *JetStreamSink) Limits() Limits {
	l := s.opts.Limits
	if mp := s.link.conn().MaxPayload(); mp > 0 {
		l.MaxPayload = mp
	}
	if n := int(s.batchSize.Load()); n > 0 && n < l.MaxBatchSize {
		l.MaxBatchSize = n
	}
	if s.opts.Now().UnixNano() < s.serialUntil.Load() {
		l.MaxBatchInflight = 1
	}
	return l
}

// serialFor is how long the sink keeps one open batch per stream after
// the server refused a second: then it tries pipelining again (the
// server's configuration may have changed; a refusal costs one retry).
const serialFor = time.Minute

// learn lowers the batch limits after the rejection err of a batch of n
// messages, opened while overlapped other batches of its stream were
// open; it reports whether err was such a rejection. A server that keeps
// one open batch per stream drops the first message of a second one
// without a word (nobody waits for its ack), so the batch's commit finds
// it incomplete: an incomplete overlapped batch counts as a refusal.
func (s *JetStreamSink) learn(err error, n int, overlapped bool) bool {
	if limit, ok := batchTooLarge(err); ok {
		if limit <= 0 || limit >= n {
			limit = max(n/2, 1)
		}
		s.batchSize.Store(int64(limit))
		return true
	}
	if tooManyInflight(err) || overlapped && batchIncomplete(err) {
		s.serialUntil.Store(s.opts.Now().Add(serialFor).UnixNano())
		return true
	}
	return false
}

// opened notes a batch of stream that sent its first message and tells
// whether another one was open then.
func (s *JetStreamSink) opened(stream string) (overlapped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	overlapped = s.open[stream] > 0
	s.open[stream]++
	return overlapped
}

// finished notes a batch of stream committed (or failed) or discarded.
func (s *JetStreamSink) finished(stream string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[stream]--; s.open[stream] <= 0 {
		delete(s.open, stream)
	}
}

// Agent is the agent id the sink writes as.
func (s *JetStreamSink) Agent() string { return s.agent }

// Prepare checks the server version and creates EDGE_<STREAM> with
// allow_atomic when missing; an existing stream must allow atomic publish
// and cover edge.<stream>.>.
func (s *JetStreamSink) Prepare(ctx context.Context, stream string) error {
	nc, js, err := s.link.get()
	if err != nil {
		return err
	}
	if v := nc.ConnectedServerVersion(); v != "" && !serverAtLeast(v, 2, 12) {
		return fmt.Errorf("%w: server version %s", ErrAtomicUnsupported, v)
	}
	name := wire.StreamName(stream)
	subj := "edge." + stream + ".>"
	ctx, cancel := withDefaultTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	ctx, cancelLink := s.link.ctx(ctx)
	defer cancelLink()
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:               name,
			Description:        "edge-agent stream " + stream + " (format: docs/central-format.md of edge-agent)",
			Subjects:           []string{subj},
			Storage:            jetstream.FileStorage,
			Replicas:           s.opts.Replicas,
			Duplicates:         s.opts.DuplicateWindow,
			AllowAtomicPublish: true,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, name)
		}
	}
	if err != nil {
		return fmt.Errorf("replicate: prepare %s: %w", name, err)
	}
	cfg := st.CachedInfo().Config
	if !cfg.AllowAtomicPublish {
		return fmt.Errorf("%w: stream %s has allow_atomic false", ErrAtomicUnsupported, name)
	}
	if !slices.Contains(cfg.Subjects, subj) {
		return fmt.Errorf("%w: stream %s subjects %v do not include %s", ErrStreamMisconfigured, name, cfg.Subjects, subj)
	}
	return nil
}

// serverAtLeast compares a "major.minor.patch[-x]" version.
func serverAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return true // unknown format: let the stream check decide
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return true
	}
	return ma > major || ma == major && mi >= minor
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// msgGetResponse is the JetStream STREAM.MSG.GET answer.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Header  []byte `json:"hdrs,omitempty"`
		Data    []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// errCodeNoMessage is JetStream's "no message found".
const errCodeNoMessage = 10037

// LastCommitted reads the last message on the agent's cut subject with
// $JS.API.STREAM.MSG.GET, which the stream leader answers (a direct get
// could be served by a lagging replica).
func (s *JetStreamSink) LastCommitted(ctx context.Context, stream string) (Committed, error) {
	nc, _, err := s.link.get()
	if err != nil {
		return Committed{}, err
	}
	ctx, cancel := s.link.ctx(ctx)
	defer cancel()
	return lastCommitted(ctx, nc, stream, s.agent, min(s.opts.RequestTimeout, 2*time.Second))
}

func lastCommitted(ctx context.Context, nc *nats.Conn, stream, agent string, timeout time.Duration) (Committed, error) {
	ctx, cancel := withDefaultTimeout(ctx, timeout)
	defer cancel()
	req, _ := json.Marshal(map[string]string{"last_by_subj": wire.CutSubject(stream, agent)})
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+wire.StreamName(stream), req)
	if err != nil {
		return Committed{}, fmt.Errorf("replicate: read last commit of %s: %w", stream, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return Committed{}, fmt.Errorf("replicate: read last commit of %s: bad answer: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == errCodeNoMessage {
			return Committed{}, nil
		}
		return Committed{}, fmt.Errorf("replicate: read last commit of %s: %w", stream, r.Error)
	}
	if r.Message == nil {
		return Committed{}, fmt.Errorf("replicate: read last commit of %s: empty answer", stream)
	}
	rec, err := wire.DecodeCommitMessage(stream, agent, r.Message.Data)
	if err != nil {
		return Committed{}, err
	}
	return Committed{Seq: r.Message.Seq, Record: rec}, nil
}

// packHint returns stream's compression hint.
func (s *JetStreamSink) packHint(stream string) *wire.PackHint {
	if h, ok := s.hints.Load(stream); ok {
		return h.(*wire.PackHint)
	}
	h, _ := s.hints.LoadOrStore(stream, new(wire.PackHint))
	return h.(*wire.PackHint)
}

// Begin starts transaction number on the current connection, within the
// limits known now.
func (s *JetStreamSink) Begin(stream string, number uint64) Txn {
	if s.opts.Layout == 1 {
		return &jsTxn{sink: s, stream: stream, number: number, limits: s.Limits()}
	}
	return &packTxn{sink: s, stream: stream, number: number, w: wire.NewPackWriter(), maxPayload: s.Limits().MaxPayload}
}

// MaxTxnEvents is the most events one transaction may hold: for layout 1
// (a message per event) the server's max batch size as known now, less
// the commit record; for layout 2 only the max payload bounds it.
func (s *JetStreamSink) MaxTxnEvents() int {
	if s.opts.Layout == 1 {
		return max(s.Limits().MaxBatchSize-1, 1)
	}
	return maxPackEvents
}

// maxPackEvents bounds a layout-2 transaction's events (memory, and the
// reader's work per message).
const maxPackEvents = 100_000

// jsTxn is one atomic batch.
type jsTxn struct {
	sink   *JetStreamSink
	stream string
	number uint64
	limits Limits
	bp     jetstreamext.BatchPublisher
	// overlapped: another batch of the stream was open when this one
	// sent its first message.
	overlapped bool
	n          int
	bytes      int64
	closed     bool
}

func (t *jsTxn) Len() int       { return t.n }
func (t *jsTxn) Bytes() int64   { return t.bytes }
func (t *jsTxn) Number() uint64 { return t.number }

func (t *jsTxn) publisher() (jetstreamext.BatchPublisher, error) {
	if t.bp == nil {
		_, js, err := t.sink.link.get()
		if err != nil {
			return nil, err
		}
		bp, err := jetstreamext.NewBatchPublisher(js, jetstreamext.BatchFlowControl{
			AckFirst:   t.sink.opts.AckFirst,
			AckTimeout: t.sink.opts.RequestTimeout,
		})
		if err != nil {
			return nil, err
		}
		t.bp = bp
		t.overlapped = t.sink.opened(t.stream)
	}
	return t.bp, nil
}

// batchHeaderBytes is what the batch publisher adds to a message:
// "Nats-Batch-Id: <22>\r\n" and "Nats-Batch-Sequence: <≤20 digits>\r\n",
// rounded up.
const batchHeaderBytes = 96

// msgSize is the size nats.go and the server check against the max
// payload: header block and data, with the batch headers to come.
func msgSize(m *nats.Msg) int64 {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n") + batchHeaderBytes
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// Add sends one event. An event that does not fit the max payload is not
// sent: the error wraps ErrMessageTooLarge, and the caller sends a marker
// in its place (AddMarker); the transaction stays usable.
func (t *jsTxn) Add(ctx context.Context, rec localstream.Record) error {
	if t.closed {
		return ErrTxnClosed
	}
	m := wire.EncodeEvent(t.stream, t.sink.agent, t.number, rec)
	if n := msgSize(m); n > t.limits.MaxPayload {
		return fmt.Errorf("%w: event %s of %d bytes (payload %d) over the central max payload %d", ErrMessageTooLarge, rec.Position, n, len(rec.Payload), t.limits.MaxPayload)
	}
	return t.send(m, int64(len(rec.Payload)))
}

// AddMarker sends, in place of rec, the marker that names its position
// and the reason it could not be sent.
func (t *jsTxn) AddMarker(ctx context.Context, rec localstream.Record, reason string) error {
	if t.closed {
		return ErrTxnClosed
	}
	m := wire.EncodeMarker(t.stream, t.sink.agent, t.number, rec, reason, false)
	if msgSize(m) > t.limits.MaxPayload {
		m = wire.EncodeMarker(t.stream, t.sink.agent, t.number, rec, reason, true)
	}
	return t.send(m, 0)
}

func (t *jsTxn) send(m *nats.Msg, payload int64) error {
	bp, err := t.publisher()
	if err != nil {
		return err
	}
	if err := bp.AddMsg(m); err != nil {
		if t.sink.learn(err, t.n+1, t.overlapped) { // an acked message (AckFirst) was refused
			err = fmt.Errorf("%w: %w", errBatchLimit, err)
		}
		return fmt.Errorf("replicate: txn %d add: %w", t.number, err)
	}
	t.n++
	t.bytes += payload
	return nil
}

// Commit sends the commit record, expecting the previous commit's sequence
// on the cut subject (fencing). A rejection for the server's batch limits
// lowers the sink's limits before it is returned.
func (t *jsTxn) Commit(ctx context.Context, prev Committed, cut localstream.StreamCut, wm watermark.Watermark, meta wire.CommitMeta) (Committed, error) {
	if t.closed {
		return Committed{}, ErrTxnClosed
	}
	t.closed = true
	rec := wire.NewCommitRecord(t.sink.agent, t.stream, t.sink.instance, t.number, cut, wm, meta, t.n, t.bytes, t.sink.opts.Now().UnixNano())
	data, err := json.Marshal(rec)
	if err != nil {
		return Committed{}, err
	}
	bp, err := t.publisher()
	if err != nil {
		return Committed{}, err
	}
	defer t.sink.finished(t.stream)
	m := nats.NewMsg(wire.CutSubject(t.stream, t.sink.agent))
	m.Header.Set(wire.HdrContentType, "application/json")
	m.Data = data
	ctx, cancel := t.sink.link.ctx(ctx)
	defer cancel()
	ack, err := bp.CommitMsg(ctx, m, jetstreamext.WithBatchExpectLastSequencePerSubject(prev.Seq))
	if err != nil {
		if t.sink.learn(err, t.n+1, t.overlapped) {
			err = fmt.Errorf("%w: %w", errBatchLimit, err)
		}
		return Committed{}, fmt.Errorf("replicate: txn %d commit: %w", t.number, err)
	}
	return Committed{Seq: ack.Sequence, Record: rec}, nil
}

// Discard abandons the transaction.
func (t *jsTxn) Discard() {
	if t.closed {
		return
	}
	t.closed = true
	if t.bp == nil {
		return
	}
	defer t.sink.finished(t.stream)
	// The server keeps an abandoned batch open until its batch timeout
	// (10 s), and while it is open, a server with one open batch per stream
	// refuses the next. A commit that must fail (it expects another stream)
	// makes the server drop the batch now. Bounded by abortTimeout; a
	// dropped link ends it at once.
	m := nats.NewMsg(wire.CutSubject(t.stream, t.sink.agent))
	ctx, cancel := context.WithTimeout(context.Background(), min(t.sink.opts.RequestTimeout, abortTimeout))
	defer cancel()
	ctx, cancelLink := t.sink.link.ctx(ctx)
	defer cancelLink()
	t.bp.CommitMsg(ctx, m, jetstreamext.WithBatchExpectStream(abortStream))
}

// abortStream is a stream name no central stream has (EDGE_<STREAM> is
// upper case): a commit expecting it always fails.
const abortStream = "edge-agent-abort"

// abortTimeout bounds the wait for the server's refusal of an abort.
const abortTimeout = time.Second
