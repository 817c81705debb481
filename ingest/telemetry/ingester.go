package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/ingest/guard"
	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/mqttwire"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttlisten"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// Ingester subscribes to drone telemetry and appends it to the telemetry
// stream, acking each message only after its append is durable. New starts
// nothing; Run connects and blocks until its ctx ends (or the store fails),
// and returns once every goroutine it started has stopped: that is the one
// way to stop it. An Ingester runs once. Stats is safe for concurrent use.
type Ingester struct {
	cfg      Config
	sink     Sink
	patterns []Pattern
	status   *Pattern
	timePath []string
	// brokerDedup holds the broker client's dedup entries (nil without a
	// broker).
	brokerDedup *brokerDedup
	c           counters

	// subscribed is closed after the first successful subscription.
	subscribed     chan struct{}
	subscribedOnce sync.Once

	// lanesMu guards lanes and ring (the dispatch order); lanes is read
	// (Peek) under its read lock.
	lanesMu sync.RWMutex
	lanes   *guard.Table[string, *lane]
	ring    []*lane
	// closing holds the drones whose released lane's writer closeReleased
	// has not closed yet (lanesMu); closeQ queues those lanes (capacity
	// MaxDrones).
	closing map[string]struct{}
	closeQ  chan *lane
	// buffered counts the items queued in all lanes (at most LaneDepth).
	buffered atomic.Int64
	// budget bounds the bytes buffered, window those in the store's
	// queue (see budget.go).
	budget budget
	window storeWindow
	// refusedAt is the receive time (Unix ns) of the last message refused
	// for want of a drone slot (0: none); waitingSince is when the
	// delivery waiting for lane space now began (0: none waits). Problems
	// reads them.
	refusedAt, waitingSince atomic.Int64
	// refusals holds the broker's refused messages until their gap
	// markers are written (refused.go).
	refusals refusals

	// wake nudges the dispatcher (capacity 1); space tells a waiting
	// delivery that the dispatcher took an item (capacity 1).
	wake, space chan struct{}
	// acks carries acks from the store's callbacks to the acker goroutine.
	acks chan func()
	// deliverMu serializes deliveries (paho's delivery goroutine and the
	// listener's connections): lane lookup, slot release and enqueue
	// assume one delivering goroutine at a time.
	deliverMu sync.Mutex
	// brokerOrder orders the broker client's PUBACKs (see ackOrder).
	brokerOrder mqttwire.AckOrder[brokerAck]
	// listener is the MQTT server for publishers (nil without Listen).
	listener *mqttlisten.Listener
	// stopping is closed when Run begins to stop.
	stopping chan struct{}
	// fatal receives the first store error (capacity 1).
	fatal chan error
	// inflight counts appends queued and not yet called back.
	inflight sync.WaitGroup
	// ackStop is closed to stop the acker once no more acks can come.
	ackStop chan struct{}
	// notes queues the watermark notes left to noteLoop (see appended);
	// notesStop is closed once no more can come.
	notes     chan pendingNote
	notesStop chan struct{}
	// ran is set by the first Run.
	ran atomic.Bool

	// dropAcks (tests only) drops every PUBACK, as a crash between the
	// append and the PUBACK would.
	dropAcks atomic.Bool
}

// New checks cfg and returns an ingester; it starts nothing.
func New(cfg Config, sink Sink) (*Ingester, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.TimeUnit, _ = ParseTimeUnit(string(cfg.TimeUnit)) // "µs" → "us"
	if sink.Stream == nil || sink.Meta == nil {
		return nil, fmt.Errorf("%w: sink needs a stream and a meta store", ErrConfig)
	}
	in := &Ingester{
		cfg: cfg, sink: sink, closing: map[string]struct{}{}, closeQ: make(chan *lane, cfg.MaxDrones),
		wake: make(chan struct{}, 1), space: make(chan struct{}, 1), acks: make(chan func(), 4*cfg.LaneDepth+1024),
		stopping: make(chan struct{}), ackStop: make(chan struct{}), fatal: make(chan error, 1),
		notes: make(chan pendingNote, 4*cfg.LaneDepth+1024), notesStop: make(chan struct{}),
		subscribed: make(chan struct{}), budget: budget{max: int64(cfg.MaxBufferedBytes), room: make(chan struct{}, 1)},
		window: storeWindow{max: storeWindowFor(cfg.MaxPayload), room: make(chan struct{}, 1)},
	}
	in.refusals.due = make(chan struct{}, 1)
	in.lanes = in.newLanes()
	if cfg.Broker != "" {
		meta, ok := sink.Meta.(dedup.MetaDeleter)
		if !ok {
			return nil, fmt.Errorf("%w: a broker needs a meta store that deletes keys (DeleteMetaKeys) to collect its dedup entries", ErrConfig)
		}
		in.brokerDedup = newBrokerDedup(meta, cfg.ClientID)
	}
	if cfg.Listen != "" {
		meta, ok := sink.Meta.(SessionMeta)
		if !ok {
			return nil, fmt.Errorf("%w: listen needs a meta store that reads and deletes keys (SessionMeta)", ErrConfig)
		}
		in.listener = mqttlisten.New(mqttlisten.Config{
			Addr: cfg.Listen, MaxConnections: cfg.MaxConnections, MaxConnectionsPerSource: cfg.MaxConnectionsPerSource,
			MaxUnconnected: cfg.MaxUnconnected, ConnectTimeout: cfg.ConnectTimeout, MaxKeepAlive: cfg.MaxKeepAlive,
			MaxPayload: cfg.MaxPayload, Meta: meta, Logger: cfg.Logger, Now: cfg.Now,
		}, listenPipeline{in})
	}
	for _, t := range cfg.Topics {
		p, _ := ParsePattern(t)
		in.patterns = append(in.patterns, p)
	}
	if cfg.StatusTopic != "" {
		p, _ := ParsePattern(cfg.StatusTopic)
		in.status = &p
	}
	if cfg.TimeField != "" {
		in.timePath = fieldPath(cfg.TimeField)
	}
	return in, nil
}

// Run loads the dedup entries, connects to the broker (retrying with
// capped backoff) and subscribes at QoS 1, and/or listens for publishers
// (Config.Listen), and ingests until ctx ends (then it returns nil) or the
// store fails (then it returns an error wrapping ErrStore). On its return
// every goroutine it started has stopped, the appends it queued are
// durable and acked, and messages not yet acked stay with their senders
// (the broker, or a publisher's session), which send them again to the
// next run. A second Run returns ErrClosed; a listen address that cannot
// be bound returns an error wrapping ErrListen.
func (in *Ingester) Run(ctx context.Context) error {
	if !in.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrClosed)
	}
	started := false
	defer func() {
		if !started && in.listener != nil {
			in.listener.CloseUnstarted() // bound by Bind, never served
		}
	}()
	if ctx.Err() != nil {
		return nil
	}
	var opts *paho.ClientOptions
	var dead []string // the broker client's superseded dedup entries
	if b := in.brokerDedup; b != nil {
		known, d, bad, err := dedup.ReadJournal(b.meta, b.prefix, b.journal)
		if err != nil {
			return fmt.Errorf("%w: read dedup entries: %w", ErrStore, err)
		}
		b.table.Load(known)
		dead = d
		in.c.dedupLoaded.Add(uint64(len(known)))
		in.c.dedupCorrupt.Add(uint64(bad))
		if opts, err = in.clientOptions(); err != nil {
			return err
		}
	}
	if err := in.Bind(); err != nil {
		return err
	}
	started = true
	// The appends outlive ctx: queued ones become durable and are acked
	// after it ends (unless the store failed).
	appendCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg, ackWG, noteWG sync.WaitGroup // the dispatcher, drop reporter, closer and collector; the acker; the noter
	wg.Go(func() { in.dispatch(appendCtx) })
	wg.Go(in.reportDrops)
	wg.Go(in.closeReleased)
	if in.brokerDedup != nil {
		wg.Go(func() { in.collectDedup(dead) })
		wg.Go(func() { in.writeRefusals(appendCtx) })
	}
	ackWG.Go(in.ackLoop)
	noteWG.Go(in.noteLoop)
	if in.listener != nil {
		in.listener.Start()
		if opts == nil {
			in.subscribedOnce.Do(func() { close(in.subscribed) })
		}
	}
	var client paho.Client
	if opts != nil {
		client = paho.NewClient(opts)
		client.Connect() // retries in the background (ConnectRetry) until Disconnect
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-in.fatal:
	}
	// Stop in pipeline order: no new messages (the listener stops
	// accepting and reading); the queued appends become durable and their
	// PUBACKs go out on the still open connections; then the connections
	// close. Messages left in the lanes stay unacked: their senders keep them.
	close(in.stopping)
	if in.listener != nil {
		in.listener.StopReading()
	}
	if runErr != nil {
		cancel() // the store failed: do not wait for it
	}
	wg.Wait()
	waitTimeout(&in.inflight, 10*time.Second)
	close(in.notesStop)
	noteWG.Wait()
	close(in.ackStop)
	ackWG.Wait()
	if in.listener != nil {
		in.listener.CloseAll()
	}
	if client != nil {
		client.Disconnect(200)
	}
	cancel()
	if runErr == nil {
		select {
		case runErr = <-in.fatal:
		default:
		}
	}
	in.cfg.Logger.Info("telemetry: stopped", "stats", in.Stats())
	return runErr
}

// collectDedup deletes the broker client's superseded dedup entries: dead
// (found by Run's load) at once, then those of a fresh read each time
// begin asks (every dedupGCEvery messages), until Run stops. Off the
// dispatcher goroutine: a collection reads the client's journal and
// deletes the dead entries in a few transactions. Run joins it before it
// returns, so it never runs after the store is closed.
func (in *Ingester) collectDedup(dead []string) {
	b := in.brokerDedup
	for {
		n, err := b.meta.DeleteMetaKeys(dead)
		in.c.dedupCollected.Add(uint64(n))
		if err != nil {
			in.c.dedupErrors.Add(1)
			in.cfg.Logger.Warn("telemetry: delete dedup entries", "err", err)
		}
		select {
		case <-b.gcDue:
		case <-in.stopping:
			return
		}
		if _, dead, _, err = dedup.ScanJournal(b.meta, b.prefix, b.journal, false); err != nil {
			in.c.dedupErrors.Add(1)
			in.cfg.Logger.Warn("telemetry: read dedup entries", "err", err)
		}
	}
}

// Bind opens the listener's socket now (Run does it otherwise), so that a
// caller can report an address in use before it starts anything else. A
// no-op without Listen or when bound; the error wraps ErrListen and the
// *net.OpError. Call it before Run, not concurrently with it.
func (in *Ingester) Bind() error {
	if in.listener == nil {
		return nil
	}
	return in.listener.Bind()
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(d):
	}
}

// clientOptions builds the paho options: persistent session, manual acks
// (written by the ingester itself: brokerAck), ordered delivery, no paho
// store (noStore), reconnect with capped backoff.
func (in *Ingester) clientOptions() (*paho.ClientOptions, error) {
	cfg := in.cfg
	o := paho.NewClientOptions().AddBroker(cfg.Broker).SetClientID(cfg.ClientID).
		SetCleanSession(false).SetAutoAckDisabled(true).SetOrderMatters(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(500 * time.Millisecond).
		SetMaxReconnectInterval(cfg.MaxReconnectInterval).SetKeepAlive(cfg.KeepAlive).
		SetPingTimeout(cfg.KeepAlive).SetConnectTimeout(cfg.ConnectTimeout).
		SetResumeSubs(false).SetStore(noStore{}).SetDefaultPublishHandler(in.onMessage).
		SetOnConnectHandler(in.onConnect).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			in.c.connectionLost.Add(1)
			in.cfg.Logger.Warn("telemetry: connection lost", "broker", cfg.Broker, "err", err)
		})
	o.SetCustomOpenConnectionFn(in.dialBroker)
	if cfg.Username != "" {
		o.SetUsername(cfg.Username)
	}
	pw, err := cfg.password()
	if err != nil {
		return nil, err
	}
	if pw != "" {
		o.SetPassword(pw)
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		o.SetTLSConfig(tc)
	}
	return o, nil
}

// onConnect (re)subscribes every pattern at QoS 1. With a persistent
// session the broker keeps the subscriptions, but a new config or a broker
// that lost its state needs them again.
func (in *Ingester) onConnect(c paho.Client) {
	in.c.connects.Add(1)
	filters := map[string]byte{}
	for _, p := range in.patterns {
		filters[p.Filter()] = 1
	}
	if in.status != nil {
		filters[in.status.Filter()] = 1
	}
	tok := c.SubscribeMultiple(filters, nil)
	if !tok.WaitTimeout(in.cfg.ConnectTimeout) || tok.Error() != nil {
		in.c.subscribeErrors.Add(1)
		in.cfg.Logger.Error("telemetry: subscribe failed", "err", tok.Error())
		return
	}
	in.subscribedOnce.Do(func() { close(in.subscribed) })
	in.cfg.Logger.Info("telemetry: connected", "broker", in.cfg.Broker, "client_id", in.cfg.ClientID)
}

// Subscribed is closed once the first subscription is in place: from then
// on the broker keeps the messages of the configured topics for this
// client (persistent session), even while it is disconnected.
func (in *Ingester) Subscribed() <-chan struct{} { return in.subscribed }

// onMessage runs on paho's single delivery goroutine, in delivery order,
// for the messages paho reads itself: a QoS 2 PUBLISH (which the QoS 1
// subscription never gets; see brokerack.go). They are acked through
// paho (m.Ack).
func (in *Ingester) onMessage(_ paho.Client, m paho.Message) {
	if !in.reserve(msgBytes(m)) {
		return // stopping: unacknowledged, the broker delivers it again
	}
	in.deliverMu.Lock()
	defer in.deliverMu.Unlock()
	n, a := in.brokerOrder.Number(), brokerAck{m: m}
	in.deliver(m, func() { in.brokerOrder.Release(n, a, sendBrokerAck) }, in.brokerDedup, true)
}

// deliver takes one message from the broker client or a listener
// connection, with in.deliverMu held (one delivery at a time: laneFor and
// enqueue rely on it) and its msgBytes reserved (the budget: given back
// here when it is dropped, else once it is durable or dropped later). It never touches the store and never waits for a
// drone slot: drops are acked here, a new drone that finds every slot held
// is refused (see refuse), everything else goes to the drone's lane,
// waiting while the lanes are full. ack sends the message's PUBACK in its
// connection's order; d keeps its dedup entry (nil: none, QoS 0 or a clean
// session). fromBroker: a retained message is a broker's replay of one
// already handled.
func (in *Ingester) deliver(m paho.Message, ack func(), d dedup.Source, fromBroker bool) {
	in.c.received.Add(1)
	recv := in.cfg.Now().UnixNano()
	topic := m.Topic()
	if in.status != nil {
		if drone, ok := in.status.Match(topic); ok {
			in.deliverStatus(m, ack, in.droneID(drone), recv, fromBroker)
			return
		}
	}
	drone := ""
	for _, p := range in.patterns {
		if d, ok := p.Match(topic); ok {
			drone = in.droneID(d)
			break
		}
	}
	switch {
	case drone == "":
		in.c.unknownTopic.Add(1)
		in.drop(m, ack)
		return
	case fromBroker && m.Retained():
		in.c.retained.Add(1)
		in.drop(m, ack)
		return
	case len(m.Payload()) > in.cfg.MaxPayload:
		in.c.oversize.Add(1)
		in.drop(m, ack)
		return
	}
	l := in.laneFor(drone, recv)
	if l == nil {
		in.refuse(m, drone, ack, recv)
		return
	}
	in.enqueue(l, item{msg: m, ack: ack, topic: topic, recv: recv, dedup: d})
}

// deliverStatus handles a status message. It takes no slot: a drone with a
// lane gets it through the lane (after its earlier telemetry); one without
// has no open writer to close, and the status is counted and acked here.
// A retained status from the broker is its replay of the last status at
// (re)subscribe — the live one came when it was published — and is
// skipped: a fleet's retained statuses must not fill the slots, and a
// replayed "offline" must not close the writer of a drone flying again.
func (in *Ingester) deliverStatus(m paho.Message, ack func(), drone string, recv int64, fromBroker bool) {
	if fromBroker && m.Retained() {
		in.c.retained.Add(1)
		in.drop(m, ack)
		return
	}
	if l := in.knownLane(drone); l != nil {
		in.enqueue(l, item{msg: m, ack: ack, topic: m.Topic(), recv: recv, status: true})
		return
	}
	switch online, known := parseStatus(m.Payload()); {
	case !known:
		in.c.statusUnknown.Add(1)
	case online:
		in.c.statusOnline.Add(1)
	default:
		in.c.statusOffline.Add(1)
	}
	in.drop(m, ack)
}

// drop acks a message that is not stored and gives its bytes back.
func (in *Ingester) drop(m paho.Message, ack func()) {
	in.release(msgBytes(m))
	in.ack(ack)
}

// droneID bounds a topic level as a drone id (see DroneID), counting the
// ids it maps.
func (in *Ingester) droneID(level string) string {
	id, mapped := DroneID(level)
	if mapped {
		in.c.droneIDsMapped.Add(1)
	}
	return id
}

// refuse turns away a message of a new drone while MaxDrones drones hold a
// slot and none can be given back: counted (DronesOverLimit), logged by
// reportDrops and reported by Problems, at once — no delivery waits for a
// slot, so known drones are never delayed by new ones.
//
// On the listener a refused QoS 1/2 message gets no PUBACK (its place in
// the connection's ack order is passed over, so later acks still go):
// the publisher keeps it and sends it again after a reconnect. From the
// broker it is dropped, written into the stream as a gap marker, and
// acknowledged once the marker is durable (refused.go): MQTT 3.1.1 has
// no negative acknowledgement, and a message held unacked would take one
// of the broker's in-flight slots for this session until it reconnects —
// enough of them stall every drone — and the reconnect would deliver it
// again.
func (in *Ingester) refuse(m paho.Message, drone string, ack func(), recv int64) {
	in.c.dronesOverLimit.Add(1)
	in.refusedAt.Store(recv)
	if r, ok := m.(interface{ Refuse() }); ok {
		r.Refuse()
		in.drop(m, ack)
		return
	}
	in.release(msgBytes(m))
	if m.Qos() == 0 {
		// Nothing to acknowledge to the broker: its place in the ack
		// order goes at once (held, it would hold back every later
		// PUBACK until the marker is durable), the marker still counts it.
		in.ack(ack)
		ack = nil
	}
	in.noteRefused(drone, len(m.Payload()), recv, ack)
}

// process handles one item on the dispatcher goroutine; false = stop.
func (in *Ingester) process(ctx context.Context, l *lane, it item) bool {
	m := it.msg
	n := msgBytes(m)
	if it.status {
		in.release(n)
		in.processStatus(l, it)
		return true
	}
	payload := m.Payload()
	pid := m.MessageID()
	d := it.dedup
	var h dedup.Hash
	if d != nil {
		h = dedup.HashMessage(it.topic, payload)
	}
	redelivered := false
	if d != nil && m.Duplicate() {
		if dup, deferred := d.Check(pid, h, it.ack); dup {
			in.release(n)
			in.c.duplicates.Add(1)
			if !deferred {
				in.ack(it.ack)
			}
			return true
		}
		redelivered = true
	}
	if !in.enterStore(n) {
		return false // stopping: unacknowledged, its sender sends it again
	}
	ev := in.buildEvent(l, it.topic, payload, it.recv)
	if redelivered {
		markRedelivered(&ev, h)
		in.c.redelivered.Add(1)
	}
	var adm watermark.Admission
	if in.sink.Marks != nil {
		adm = in.sink.Marks.Admit(l.writer, ev.EventTime, ev.IngestTime)
		ev.Flags |= adm.Flags()
		if adm.Late {
			in.c.late.Add(1)
		}
		if adm.Skew != watermark.SkewNone {
			in.c.clockSkew.Add(1)
		}
	}
	var opts []localstream.AppendOption
	if d != nil {
		d.Begin(pid, h)
		opts = append(opts, d.Option(pid, h))
	}
	l.mu.Lock()
	l.pending++
	l.mu.Unlock()
	in.inflight.Add(1)
	// The callback keeps what appended needs, not the event: a closure
	// over ev would move the whole event to the heap for every message.
	ack, evTime := it.ack, ev.EventTime
	cb := func(pos localstream.Position, err error) {
		in.leaveStore(n)
		in.release(n)
		in.appended(l, ack, d, pid, h, adm, evTime, pos, err)
	}
	err := in.appendWaitingForSpace(ctx, ev, cb, opts...)
	if err == nil {
		return true
	}
	in.leaveStore(n)
	in.release(n)
	in.inflight.Done()
	l.mu.Lock()
	l.pending--
	l.mu.Unlock()
	var waiters []func()
	if d != nil {
		waiters = d.Done(pid, h, false)
	}
	switch {
	case errors.Is(err, localstream.ErrEventTooLarge):
		in.c.oversize.Add(1)
		in.ack(it.ack)
		for _, w := range waiters {
			in.ack(w)
		}
		return true
	case ctx.Err() != nil, errors.Is(err, errStopping):
		return false // unacknowledged: the broker redelivers it to the next run
	default:
		in.fail(err)
		return false
	}
}

// appendWaitingForSpace appends; while the store refuses for lack of disk
// space (ErrDiskFull: nothing written) it waits and tries again, holding
// this message unacknowledged — the broker keeps it and the ones behind
// it — so a full disk pauses telemetry instead of losing or stopping it.
// A stop ends the wait (errStopping): the message stays unacknowledged
// and the broker redelivers it to the next run.
func (in *Ingester) appendWaitingForSpace(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error {
	wait := 50 * time.Millisecond
	for counted := false; ; {
		err := in.sink.Stream.AppendAsync(ctx, ev, cb, opts...)
		if !errors.Is(err, localstream.ErrDiskFull) {
			return err
		}
		if !counted {
			in.c.diskFullWaits.Add(1)
			counted = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-in.stopping:
			return errStopping
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// appended is the store's callback, in append order. A drone's event is
// noted for watermarks here, then acked — except while the drone's first
// note is not done (see firstNotes): then it is acked at once and noted by
// noteLoop, in order.
func (in *Ingester) appended(l *lane, ack func(), d dedup.Source, pid uint16, h dedup.Hash, adm watermark.Admission, t int64, pos localstream.Position, err error) {
	defer in.inflight.Done()
	if err != nil {
		in.fail(err)
		return
	}
	var waiters []func()
	if d != nil {
		waiters = d.Done(pid, h, true)
	}
	in.c.appended.Add(1)
	later := false
	if in.sink.Marks != nil {
		l.mu.Lock()
		if later = !l.noted || l.noting > 0; later {
			l.noting++
		}
		l.mu.Unlock()
		if later {
			in.notes <- pendingNote{l: l, adm: adm, t: t, pos: pos}
		} else if err := in.sink.Marks.NoteAdmitted(l.writer, adm, t, pos); err != nil {
			in.c.markErrors.Add(1)
		}
	}
	in.ack(ack)
	for _, w := range waiters {
		in.ack(w)
	}
	if !later {
		in.noted(l)
	}
}

// pendingNote is a watermark note left to noteLoop.
type pendingNote struct {
	l   *lane
	adm watermark.Admission
	t   int64
	pos localstream.Position
}

// The first note of a writer persists it at once (a synchronous store
// write, the writer's floor). On the store's callback goroutine that
// write held up every stream's callbacks — every drone's acks, video's
// too: one client publishing to hundreds of new drone ids a second
// stalled them all for seconds. So a lane's notes go to noteLoop until
// its first one is done (its events are durable and acked meanwhile: a
// crash before a note loses the note, not the event, as it always could
// between the append and the note), and stay there, in order, while any
// is queued. Known drones are noted inline as before.

// noteLoop notes what appended left to it, in order, until notesStop is
// closed and the queue is empty.
func (in *Ingester) noteLoop() {
	for {
		var n pendingNote
		select {
		case n = <-in.notes:
		case <-in.notesStop:
			select {
			case n = <-in.notes:
			default:
				return
			}
		}
		if err := in.sink.Marks.NoteAdmitted(n.l.writer, n.adm, n.t, n.pos); err != nil {
			in.c.markErrors.Add(1)
		}
		n.l.mu.Lock()
		n.l.noting--
		n.l.noted = true
		n.l.mu.Unlock()
		in.noted(n.l)
	}
}

// noted ends an append's life in its lane once it is noted: the last one
// pending lets a waiting offline status close the writer.
func (in *Ingester) noted(l *lane) {
	l.mu.Lock()
	l.pending--
	var closeAcks []func()
	if l.pending == 0 && l.closeReq {
		closeAcks, l.closeReq, l.closeAcks = l.closeAcks, false, nil
	}
	l.mu.Unlock()
	if closeAcks != nil {
		in.closeWriter(l, closeAcks)
	}
}

// processStatus marks a drone online or offline. Offline closes its writer
// once every earlier event of the drone is durable and noted.
func (in *Ingester) processStatus(l *lane, it item) {
	online, known := parseStatus(it.msg.Payload())
	switch {
	case !known:
		in.c.statusUnknown.Add(1)
		in.ack(it.ack)
		return
	case online:
		in.c.statusOnline.Add(1)
		l.mu.Lock()
		acks := l.closeAcks
		l.closeReq, l.closeAcks = false, nil // back before its close took effect
		l.mu.Unlock()
		for _, a := range append(acks, it.ack) {
			in.ack(a)
		}
		return
	}
	in.c.statusOffline.Add(1)
	l.mu.Lock()
	if l.pending > 0 {
		l.closeReq = true
		l.closeAcks = append(l.closeAcks, it.ack)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	in.closeWriter(l, []func(){it.ack})
}

func (in *Ingester) closeWriter(l *lane, acks []func()) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if in.sink.Marks != nil {
		if err := in.sink.Marks.CloseWriter(l.writer); err != nil {
			in.c.markErrors.Add(1)
		}
	}
	in.c.writersClosed.Add(1)
	for _, a := range acks {
		in.ack(a)
	}
}

// fail records the first store error; Run returns it.
func (in *Ingester) fail(err error) {
	select {
	case in.fatal <- fmt.Errorf("%w: %w", ErrStore, err):
	default:
	}
}

// ackLoop sends PUBACKs off the store's callback goroutine. An ack whose
// connection is gone is dropped by paho; the broker then redelivers the
// message with DUP set and the dedup entry catches it.
func (in *Ingester) ackLoop() {
	for {
		select {
		case a := <-in.acks:
			a()
		case <-in.ackStop:
			for { // send what is queued, then stop
				select {
				case a := <-in.acks:
					a()
				default:
					return
				}
			}
		}
	}
}

// ack queues a PUBACK; after the acker stopped it is dropped (the broker
// redelivers, the dedup entry catches it).
func (in *Ingester) ack(a func()) {
	if in.dropAcks.Load() {
		return
	}
	select {
	case in.acks <- a:
	case <-in.ackStop:
	}
}
