package sync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/edge-agent/edge-agent/localstream"
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
	// Layout is the central layout written: 2 (default: a transaction
	// is one message packing its events and commit record) or 1 (one
	// message per event, as before version 2; for consumers that read
	// the subjects directly). Both are read back.
	Layout int
	// Now is the clock for commit records. Default time.Now.
	Now func() time.Time
}

// JetStreamSink is the Sink on NATS JetStream with atomic batch publish
// (orbit.go jetstreamext, ADR-50). It is safe for concurrent use.
type JetStreamSink struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	agent    string
	instance string
	opts     JetStreamOptions

	// status receives the connection's disconnects; watch turns each into
	// closing lost, which aborts every request in flight: its answer can
	// never come over the new connection, and waiting out a timeout would
	// delay the recovery.
	status chan nats.Status
	mu     stdsync.Mutex
	lost   chan struct{} // guarded by mu
	done   chan struct{}
	closed bool // guarded by mu
}

// NewJetStreamSink returns the sink of agent on nc. instance should be
// random per process run (it marks the commit records of this run).
func NewJetStreamSink(nc *nats.Conn, agent, instance string, opts JetStreamOptions) (*JetStreamSink, error) {
	if agent == "" {
		return nil, fmt.Errorf("%w: agent id is required", ErrConfig)
	}
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
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(opts.RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("sync: jetstream: %w", err)
	}
	s := &JetStreamSink{nc: nc, js: js, agent: agent, instance: instance, opts: opts,
		status: nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED),
		lost:   make(chan struct{}), done: make(chan struct{})}
	go s.watch()
	return s, nil
}

// watch closes lost on every disconnect, until Close.
func (s *JetStreamSink) watch() {
	defer close(s.done)
	for st := range s.status {
		s.mu.Lock()
		close(s.lost)
		s.lost = make(chan struct{})
		s.mu.Unlock()
		if st == nats.CLOSED {
			return
		}
	}
}

// Close stops the sink's watcher (the connection is the caller's). It is
// idempotent.
func (s *JetStreamSink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.nc.RemoveStatusListener(s.status)
	select {
	case <-s.done:
	case <-time.After(time.Second):
	}
	return nil
}

// linkCtx derives a context that ends when the link drops.
func (s *JetStreamSink) linkCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	s.mu.Lock()
	lost := s.lost
	s.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-lost:
			cancel(errLinkLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Agent is the agent id the sink writes as.
func (s *JetStreamSink) Agent() string { return s.agent }

// Prepare checks the server version and creates EDGE_<STREAM> with
// allow_atomic when missing; an existing stream must allow atomic publish
// and cover edge.<stream>.>.
func (s *JetStreamSink) Prepare(ctx context.Context, stream string) error {
	if v := s.nc.ConnectedServerVersion(); v != "" && !serverAtLeast(v, 2, 12) {
		return fmt.Errorf("%w: server version %s", ErrAtomicUnsupported, v)
	}
	name := StreamName(stream)
	subj := "edge." + stream + ".>"
	ctx, cancel := withDefaultTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	ctx, cancelLink := s.linkCtx(ctx)
	defer cancelLink()
	st, err := s.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:               name,
			Description:        "edge-agent stream " + stream + " (see DESIGN.md, the central store)",
			Subjects:           []string{subj},
			Storage:            jetstream.FileStorage,
			Replicas:           s.opts.Replicas,
			Duplicates:         s.opts.DuplicateWindow,
			AllowAtomicPublish: true,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.js.Stream(ctx, name)
		}
	}
	if err != nil {
		return fmt.Errorf("sync: prepare %s: %w", name, err)
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
	ctx, cancel := s.linkCtx(ctx)
	defer cancel()
	return lastCommitted(ctx, s.nc, stream, s.agent, min(s.opts.RequestTimeout, 2*time.Second))
}

func lastCommitted(ctx context.Context, nc *nats.Conn, stream, agent string, timeout time.Duration) (Committed, error) {
	ctx, cancel := withDefaultTimeout(ctx, timeout)
	defer cancel()
	req, _ := json.Marshal(map[string]string{"last_by_subj": CutSubject(stream, agent)})
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+StreamName(stream), req)
	if err != nil {
		return Committed{}, fmt.Errorf("sync: read last commit of %s: %w", stream, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return Committed{}, fmt.Errorf("sync: read last commit of %s: bad answer: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == errCodeNoMessage {
			return Committed{}, nil
		}
		return Committed{}, fmt.Errorf("sync: read last commit of %s: %w", stream, r.Error)
	}
	if r.Message == nil {
		return Committed{}, fmt.Errorf("sync: read last commit of %s: empty answer", stream)
	}
	rec, err := decodeCommitMessage(stream, agent, r.Message.Data)
	if err != nil {
		return Committed{}, err
	}
	return Committed{Seq: r.Message.Seq, Record: rec}, nil
}

// Begin starts transaction number.
func (s *JetStreamSink) Begin(stream string, number uint64) Txn {
	if s.opts.Layout == 1 {
		return &jsTxn{sink: s, stream: stream, number: number}
	}
	return &packTxn{sink: s, stream: stream, number: number, w: newPackWriter()}
}

// MaxTxnEvents is the most events one transaction may hold: the server's
// batch size for layout 1 (a message per event); for layout 2 only the
// max payload bounds it.
func (s *JetStreamSink) MaxTxnEvents() int {
	if s.opts.Layout == 1 {
		return 999
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
	bp     jetstreamext.BatchPublisher
	n      int
	bytes  int64
	closed bool
}

func (t *jsTxn) Len() int       { return t.n }
func (t *jsTxn) Bytes() int64   { return t.bytes }
func (t *jsTxn) Number() uint64 { return t.number }

func (t *jsTxn) publisher() (jetstreamext.BatchPublisher, error) {
	if t.bp == nil {
		bp, err := jetstreamext.NewBatchPublisher(t.sink.js, jetstreamext.BatchFlowControl{
			AckFirst:   t.sink.opts.AckFirst,
			AckTimeout: t.sink.opts.RequestTimeout,
		})
		if err != nil {
			return nil, err
		}
		t.bp = bp
	}
	return t.bp, nil
}

// msgSize is the size the server checks against max payload.
func msgSize(m *nats.Msg) int {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + 64 // batch headers added by the publisher
}

// Add sends one event.
func (t *jsTxn) Add(ctx context.Context, rec localstream.Record) error {
	if t.closed {
		return ErrTxnClosed
	}
	m := EncodeEvent(t.stream, t.sink.agent, t.number, rec)
	if mp := t.sink.nc.MaxPayload(); mp > 0 && int64(msgSize(m)) > mp {
		return fmt.Errorf("%w: event %s of %d bytes, max payload %d", ErrMessageTooLarge, rec.Position, msgSize(m), mp)
	}
	bp, err := t.publisher()
	if err != nil {
		return err
	}
	if err := bp.AddMsg(m); err != nil {
		return fmt.Errorf("sync: txn %d add: %w", t.number, err)
	}
	t.n++
	t.bytes += int64(len(rec.Payload))
	return nil
}

// Commit sends the commit record, expecting the previous commit's sequence
// on the cut subject (fencing).
func (t *jsTxn) Commit(ctx context.Context, prev Committed, cut localstream.StreamCut, wm Watermark, meta CommitMeta) (Committed, error) {
	if t.closed {
		return Committed{}, ErrTxnClosed
	}
	t.closed = true
	rec := newCommitRecord(t.sink.agent, t.stream, t.sink.instance, t.number, cut, wm, meta, t.n, t.bytes, t.sink.opts.Now().UnixNano())
	data, err := json.Marshal(rec)
	if err != nil {
		return Committed{}, err
	}
	bp, err := t.publisher()
	if err != nil {
		return Committed{}, err
	}
	m := nats.NewMsg(CutSubject(t.stream, t.sink.agent))
	m.Header.Set(HdrContentType, "application/json")
	m.Data = data
	ctx, cancel := t.sink.linkCtx(ctx)
	defer cancel()
	ack, err := bp.CommitMsg(ctx, m, jetstreamext.WithBatchExpectLastSequencePerSubject(prev.Seq))
	if err != nil {
		return Committed{}, fmt.Errorf("sync: txn %d commit: %w", t.number, err)
	}
	return Committed{Seq: ack.Sequence, Record: rec}, nil
}

// Discard abandons the transaction.
func (t *jsTxn) Discard() {
	if t.closed {
		return
	}
	t.closed = true
	if t.bp != nil {
		t.bp.Discard()
	}
}
