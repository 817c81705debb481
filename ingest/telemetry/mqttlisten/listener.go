package mqttlisten

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/ingest/guard"
	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/mqttwire"
)

// The listener is an MQTT 3.1.1 server for publishers only: drones connect
// to the agent and publish their telemetry, with no broker in between. It
// is not a broker: a SUBSCRIBE is answered with a SUBACK of failures
// (0x80), nothing is ever sent to a client but acknowledgements.
//
//   - CONNECT must come within ConnectTimeout, else the connection closes
//     (listener_connect_timeouts). A bad protocol name or level, a client id
//     over maxClientID bytes, or an empty one with clean session off, is
//     answered with the CONNACK refusal code and closed
//     (listener_connect_refused). A client id already connected takes the
//     session over: the older connection is closed (listener_takeovers),
//     without its will.
//   - Keep-alive: a client silent for 1.5 × its keep-alive is disconnected
//     (listener_keepalive_timeouts) and its will delivered. A keep-alive of
//     0 (none) or above MaxKeepAlive counts as MaxKeepAlive: every
//     connection has a deadline.
//   - PUBLISH QoS 0: stored, nothing to ack. QoS 1: PUBACK once the event is
//     durable. QoS 2: PUBREC once durable, PUBCOMP on PUBREL — the same
//     exactly-once as QoS 1 (the dedup entry holds until the packet id is
//     reused), not a second mechanism. Acknowledgements of one connection
//     go out in the order its PUBLISHes came (MQTT 3.1.1 §4.6.0-2),
//     coalesced: one write carries every ack ready.
//   - Bounds (ingest/guard's Limiter): MaxConnections (one more is
//     accepted and closed: listener_refused, unless a connection without
//     a CONNECT for half the ConnectTimeout can be evicted for it); MaxConnectionsPerSource from one IP (one more is
//     closed: listener_source_refused); MaxUnconnected connections before
//     their CONNECT (a newcomer evicts the oldest of them:
//     listener_unconnected_evicted) — each logged and reported by
//     Problems (/healthz) for a minute; a packet's remaining length above
//     mqttwire.PacketBound(MaxPayload) closes the connection before anything is allocated
//     (listener_too_large); a payload above MaxPayload but within that is
//     dropped and acked as from the broker (oversize). While the lanes are
//     full a connection is not read: TCP pushes back on the publisher. A
//     client that does not read its acks (maxPendingWrite unread bytes) is
//     disconnected (listener_slow_readers).
//   - Anything else that is not MQTT 3.1.1 (a second CONNECT, a packet a
//     server never receives, a wildcard in a PUBLISH topic, garbage) closes
//     the connection (listener_protocol_errors) and delivers the will.
//   - Persistent sessions (clean session off) keep the dedup entries across
//     reconnects (internal/dedup): a QoS 1/2 message resent with DUP
//     after a crash or a cut is acked, not stored twice. The CONNACK's
//     session-present flag is always 0: the agent keeps no subscriptions or
//     outgoing messages, and a client keeps (and resends) its own
//     in-flight messages whatever the flag says.
//   - The last will is delivered as a message when a connection ends
//     without DISCONNECT (lost, keep-alive, protocol error), not when the
//     agent stops or the session is taken over. On the status topic,
//     "offline" closes the drone's writer as with a broker's will.
//   - No authentication and no TLS: bind the listener to the drones' link
//     (a private network) or put Mosquitto in front.

// maxClientID bounds a client id (MQTT 3.1.1 servers must accept 23).
const maxClientID = 256

// Listener accepts publishers' connections and delivers their messages
// into a Pipeline. Bind, Start, StopReading and CloseAll are called in
// that order (the telemetry Ingester's Run does).
type Listener struct {
	cfg     Config
	p       Pipeline
	pending *dedup.Pending
	// maxPacket bounds a packet's remaining length.
	maxPacket int
	// c are the counters (Stats).
	c counters
	// lastLockout is the last connection turned away (nil: none).
	lastLockout atomic.Pointer[lockout]
	// stopping is closed by StopReading.
	stopping chan struct{}

	// ln is set by Bind: the socket behind a guard.Limiter, which
	// holds the connection bounds (admit); addr is its address (for Addr).
	ln   net.Listener
	addr atomic.Pointer[net.TCPAddr]
	// wg joins the accept loop and the connections' goroutines.
	wg sync.WaitGroup

	// mu guards conns and clients.
	mu    sync.Mutex
	conns map[*serverConn]struct{}
	// clients maps a connected client id to its connection (takeover).
	clients map[string]*serverConn
	// anon numbers the client ids given to clients that sent none.
	anon atomic.Uint64
}

// New returns a listener of cfg (see Config: every field is required)
// delivering into p; it opens nothing.
func New(cfg Config, p Pipeline) *Listener {
	return &Listener{
		cfg: cfg, p: p, pending: dedup.NewPending(), stopping: make(chan struct{}),
		maxPacket: mqttwire.PacketBound(cfg.MaxPayload),
		conns:     map[*serverConn]struct{}{}, clients: map[string]*serverConn{},
	}
}

// Bind opens the listening socket (a no-op once bound). The error wraps
// ErrListen and the *net.OpError.
func (l *Listener) Bind() error {
	if l.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", l.cfg.Addr)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrListen, l.cfg.Addr, err)
	}
	l.ln = l.limit(ln)
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		l.addr.Store(a)
	}
	l.cfg.Logger.Info("telemetry: listening for publishers", "listen", ln.Addr().String())
	return nil
}

// CloseUnstarted closes the socket of a listener bound and never started.
func (l *Listener) CloseUnstarted() {
	if l.ln != nil {
		l.ln.Close()
	}
}

// Addr is the bound address (nil before Bind). Safe for concurrent use.
func (l *Listener) Addr() *net.TCPAddr { return l.addr.Load() }

// Start runs the accept loop.
func (l *Listener) Start() { l.wg.Go(l.acceptLoop) }

func (l *Listener) acceptLoop() {
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.cfg.Logger.Warn("telemetry: listener accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-l.stopping:
				return
			}
			continue
		}
		delay = 0
		l.admit(nc)
	}
}

// limit puts the connection bounds in front of ln (guard.Limiter):
// MaxConnections in all and MaxConnectionsPerSource from one address (one
// more is closed at once, counted, logged, reported by Problems), and
// MaxUnconnected before their CONNECT (a newcomer evicts the oldest of
// those: a host holding sockets open without a CONNECT cannot keep a
// drone from connecting). When every connection is open, one that has
// sent no CONNECT for half the ConnectTimeout makes room for a newcomer
// before its own timeout; a connected client is never evicted.
func (l *Listener) limit(ln net.Listener) net.Listener {
	return guard.NewLimiter(ln, guard.LimiterConfig{
		Max: l.cfg.MaxConnections, MaxPerSource: l.cfg.MaxConnectionsPerSource, MaxIdle: l.cfg.MaxUnconnected,
		EvictAfter: l.cfg.ConnectTimeout / 2, Now: l.cfg.Now,
		OnRefuse: func(r guard.Refusal, src string) {
			if r == guard.RefusedSource {
				l.c.SourceRefused.Add(1)
				l.noteLockout(fmt.Sprintf("listener refusing connections from %s: it holds max_connections_per_source %d", src, l.cfg.MaxConnectionsPerSource))
				return
			}
			l.c.Refused.Add(1)
			l.noteLockout(fmt.Sprintf("listener refusing connections: all max_connections %d are open", l.cfg.MaxConnections))
		},
		OnEvict: func(bool) {
			l.c.UnconnectedEvicted.Add(1)
			l.noteLockout(fmt.Sprintf("listener evicting connections without CONNECT: max_unconnected %d are waiting (a host opening idle connections?)", l.cfg.MaxUnconnected))
		},
	})
}

// admit takes a connection the limiter admitted in.
func (l *Listener) admit(nc net.Conn) {
	c := &serverConn{l: l, bc: mqttwire.NewServerConn(nc)}
	c.gc, _ = nc.(*guard.Conn)
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	l.c.Accepted.Add(1)
	l.c.Connections.Add(1)
	l.wg.Go(c.serve)
}

// connected marks c active (its CONNECT was accepted): it is no longer
// one the limiter may evict.
func (l *Listener) connected(c *serverConn) {
	if c.gc != nil {
		c.gc.Active()
	}
}

// StopReading stops accepting and reading, and waits for every
// connection's goroutine to return; the connections stay open for their
// last acks (CloseAll closes them).
func (l *Listener) StopReading() {
	close(l.stopping)
	l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		c.bc.SetReadDeadline(time.Unix(1, 0))
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// CloseAll flushes and closes the connections still open (after the last
// acks were queued), in parallel: each flush waits at most a second.
func (l *Listener) CloseAll() {
	l.mu.Lock()
	conns := l.conns
	l.conns = map[*serverConn]struct{}{}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() { c.close() })
	}
	wg.Wait()
}

// register makes c the connection of its client id, closing (taking over)
// an older one.
func (l *Listener) register(c *serverConn) {
	l.mu.Lock()
	old := l.clients[c.client]
	l.clients[c.client] = c
	l.mu.Unlock()
	if old != nil {
		l.c.Takeovers.Add(1)
		old.takenOver.Store(true)
		old.bc.Conn.Close() // its goroutine ends and cleans up
	}
}

// serverConn is one publisher's connection.
type serverConn struct {
	l  *Listener
	bc *mqttwire.BufferedConn
	// gc is the connection as the limiter holds it (Active at CONNECT).
	gc *guard.Conn
	// buf holds the buffers reused from packet to packet (the
	// connection's goroutine only).
	buf mqttwire.PacketBuf
	// client, clean, will and dedup are set at CONNECT.
	client string
	clean  bool
	will   *Message
	dedup  *dedup.Session // nil: a clean session
	// order orders the acks of this connection's messages.
	order mqttwire.AckOrder[mqttwire.PubAck]
	// disconnected: the client sent DISCONNECT (no will).
	disconnected bool
	// takenOver: a newer connection of the same client id replaced this one.
	takenOver atomic.Bool
	closeOnce sync.Once
}

// serve runs the connection until it ends or the listener stops reading.
func (c *serverConn) serve() {
	err := c.run()
	l := c.l
	if l.isStopping() {
		return // Run closes the connection after the last acks
	}
	c.count(err)
	l.mu.Lock()
	delete(l.conns, c)
	if c.client != "" && l.clients[c.client] == c {
		delete(l.clients, c.client)
	}
	l.mu.Unlock()
	c.close()
	if c.will != nil && !c.disconnected && !c.takenOver.Load() && l.p.Reserve(c.will) {
		l.c.Wills.Add(1)
		l.p.Deliver(c.will, noAck, nil)
	}
}

// close flushes and closes the connection and gives its slot back, once.
func (c *serverConn) close() {
	c.closeOnce.Do(func() {
		c.bc.Close()
		if c.bc.Slow() {
			c.l.c.SlowReaders.Add(1)
		}
		c.l.c.Connections.Add(-1) // closing bc closed gc: its slot is back
	})
}

// count records why a connection ended.
func (c *serverConn) count(err error) {
	cs := &c.l.c
	var ne net.Error
	switch {
	case err == nil:
		cs.Disconnects.Add(1)
	case errors.Is(err, mqttwire.ErrPacketTooLarge):
		cs.TooLarge.Add(1)
	case errors.Is(err, mqttwire.ErrMalformed):
		cs.ProtocolErrors.Add(1)
	case errors.Is(err, errConnectTimeout):
		cs.ConnectTimeouts.Add(1)
	case errors.Is(err, errConnectRefused):
		cs.ConnectRefused.Add(1)
	case errors.As(err, &ne) && ne.Timeout():
		cs.KeepAliveTimeouts.Add(1)
	default: // EOF, reset: the client went away without DISCONNECT
		cs.Lost.Add(1)
	}
}

var (
	errConnectTimeout = errors.New("telemetry: no CONNECT in time")
	errConnectRefused = errors.New("telemetry: CONNECT refused")
)

func (l *Listener) isStopping() bool {
	select {
	case <-l.stopping:
		return true
	default:
		return false
	}
}

// setDeadline sets the read deadline, unless the listener stopped reading
// (stopReading's past deadline must win whichever call comes last).
func (c *serverConn) setDeadline(t time.Time) {
	c.bc.SetReadDeadline(t)
	if c.l.isStopping() {
		c.bc.SetReadDeadline(time.Unix(1, 0))
	}
}

// run reads the CONNECT and then packets until an error or DISCONNECT
// (nil).
func (c *serverConn) run() error {
	l := c.l
	c.setDeadline(time.Now().Add(l.cfg.ConnectTimeout))
	cp, err := mqttwire.ReadPacket(c.bc.R, c.l.maxPacket, &c.buf)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errConnectTimeout
		}
		return err
	}
	cc, ok := cp.(*packets.ConnectPacket)
	if !ok {
		return fmt.Errorf("%w: %T before CONNECT", mqttwire.ErrMalformed, cp)
	}
	if err := c.connect(cc); err != nil {
		return err
	}
	c.l.connected(c)
	// Every connection has a deadline: a keep-alive of 0 (none, MQTT
	// 3.1.1 §3.1.2.10) or above MaxKeepAlive gets MaxKeepAlive — 256
	// connections with keep-alive 0 used to hold every slot for good.
	ka := time.Duration(cc.Keepalive) * time.Second
	if ka == 0 || ka > l.cfg.MaxKeepAlive {
		ka = l.cfg.MaxKeepAlive
	}
	keepAlive := ka * 3 / 2
	var refreshed time.Time
	for {
		// A deadline set per packet is a runtime timer update per message:
		// refreshed at most every keepAlive/8, so a connection silent for
		// 7/8 to 1 × keepAlive (1.3–1.5 × the client's keep-alive) is closed.
		if now := time.Now(); now.Sub(refreshed) >= keepAlive/8 {
			c.setDeadline(now.Add(keepAlive))
			refreshed = now
		}
		cp, err := mqttwire.ReadPacket(c.bc.R, c.l.maxPacket, &c.buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return io.EOF
			}
			return err
		}
		switch p := cp.(type) {
		case *packets.PublishPacket:
			if err := c.publish(p); err != nil {
				return err
			}
			if c.dedup != nil && c.dedup.GCDue() {
				c.collectDedup()
			}
		case *packets.PubrelPacket:
			ack := packets.NewControlPacket(packets.Pubcomp).(*packets.PubcompPacket)
			ack.MessageID = p.MessageID
			c.write(ack)
		case *packets.PingreqPacket:
			c.write(packets.NewControlPacket(packets.Pingresp))
		case *packets.SubscribePacket:
			l.c.SubscribeRefused.Add(1)
			ack := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			ack.MessageID = p.MessageID
			for range p.Topics {
				ack.ReturnCodes = append(ack.ReturnCodes, 0x80)
			}
			c.write(ack)
		case *packets.UnsubscribePacket:
			ack := packets.NewControlPacket(packets.Unsuback).(*packets.UnsubackPacket)
			ack.MessageID = p.MessageID
			c.write(ack)
		case *packets.DisconnectPacket:
			c.disconnected = true
			return nil
		default:
			return fmt.Errorf("%w: %T from a client", mqttwire.ErrMalformed, cp)
		}
	}
}

// connect answers a CONNECT: refuses it with its CONNACK code, or takes the
// session (deleting a clean session's stored dedup entries) and accepts.
func (c *serverConn) connect(cc *packets.ConnectPacket) error {
	l := c.l
	ack := packets.NewControlPacket(packets.Connack).(*packets.ConnackPacket)
	ack.ReturnCode = cc.Validate()
	if ack.ReturnCode == packets.Accepted && len(cc.ClientIdentifier) > maxClientID {
		ack.ReturnCode = packets.ErrRefusedIDRejected
	}
	if ack.ReturnCode == packets.Accepted && cc.WillFlag && cc.WillQos == 3 {
		ack.ReturnCode = packets.ErrProtocolViolation
	}
	if ack.ReturnCode != packets.Accepted {
		c.write(ack)
		return fmt.Errorf("%w: code %d", errConnectRefused, ack.ReturnCode)
	}
	c.client, c.clean = cc.ClientIdentifier, cc.CleanSession
	if c.client == "" {
		// Unique, and never a client's own id (MQTT strings are UTF-8: no 0xff).
		c.client = "\xff" + strconv.FormatUint(l.anon.Add(1), 10)
	}
	l.register(c)
	if c.clean {
		if _, err := l.cfg.Meta.DeleteMetaPrefix(dedup.ListenPrefix(c.client)); err != nil {
			l.p.Fail(err)
			return err
		}
	} else {
		c.dedup = dedup.NewSession(l.pending, l.cfg.Meta, c.client, func(err error) {
			l.c.DedupErrors.Add(1)
			l.cfg.Logger.Warn("telemetry: read a listener client's dedup entries; the DUP is stored", "client", c.client, "err", err)
		})
		c.collectDedup()
	}
	if cc.WillFlag {
		c.will = &Message{topic: cc.WillTopic, payload: cc.WillMessage, qos: cc.WillQos, retained: cc.WillRetain}
	}
	l.c.Connects.Add(1)
	c.write(ack)
	return nil
}

// collectDedup deletes the client's dedup journal entries that newer
// ones superseded (dedupGC): at a persistent CONNECT and every
// dedupGCEvery messages, on the connection's goroutine (its reads wait).
func (c *serverConn) collectDedup() {
	n, err := c.dedup.Collect()
	c.l.c.DedupCollected.Add(uint64(n))
	if err != nil {
		// Nothing is lost: the entries stay until a later collection.
		c.l.c.DedupErrors.Add(1)
		c.l.cfg.Logger.Warn("telemetry: collect a listener client's dedup entries", "client", c.client, "err", err)
	}
}

// publish delivers one PUBLISH into the pipeline, with its ack in this
// connection's order.
func (c *serverConn) publish(p *packets.PublishPacket) error {
	if !validPublishTopic(p.TopicName) {
		return fmt.Errorf("%w: publish topic %q", mqttwire.ErrMalformed, p.TopicName)
	}
	m := &Message{topic: p.TopicName, payload: p.Payload, qos: p.Qos, dup: p.Dup, retained: p.Retain, id: p.MessageID, c: c}
	ack := noAck
	var d dedup.Source
	l := c.l
	if !l.p.Reserve(m) {
		return nil // stopping: unacknowledged, the client sends it again
	}
	if p.Qos > 0 {
		n, a := c.order.Number(), mqttwire.PubAck{ID: p.MessageID, QoS: p.Qos}
		ack = func() {
			// A copy: a closure that wrote a would move it to the heap (an
			// allocation per message). A refused message's place is passed
			// over in the order, nothing sent.
			b := a
			b.None = m.refused
			c.order.Release(n, b, c.sendAck)
		}
		if c.dedup != nil { // not a typed nil in d
			d = c.dedup
		}
	}
	if p.Qos == 2 {
		l.c.QoS2.Add(1)
	}
	l.p.Deliver(m, ack, d)
	return nil
}

// sendAck sends a PUBLISH's acknowledgement. Called on the acker
// goroutine; the write never blocks (a failed connection drops it).
func (c *serverConn) sendAck(a mqttwire.PubAck) {
	if a.None {
		return
	}
	var b [4]byte
	_, _ = c.bc.Write(mqttwire.AppendPubAck(b[:0], a))
}

// write queues a packet; a failed connection drops it (the client resends
// what it did not get an ack for).
func (c *serverConn) write(p packets.ControlPacket) { _ = p.Write(c.bc) }

// validPublishTopic: MQTT 3.1.1 §4.7.3, §3.3.2-2: a PUBLISH topic is not
// empty and holds no wildcard.
func validPublishTopic(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] == '+' || t[i] == '#' || t[i] == 0 {
			return false
		}
	}
	return true
}

// noAck is the ack of a message that needs none (QoS 0, a will).
func noAck() {}

// Message is a PUBLISH (or a will) received by the listener, shaped as
// paho's Message so that it takes the broker client's path.
type Message struct {
	topic    string
	payload  []byte
	qos      byte
	dup      bool
	retained bool
	id       uint16
	// c is the connection a PUBLISH came on (nil: a will).
	c *serverConn
	// refused: no drone slot for it (Ingester.refuse); set before its
	// ack is queued, read by the ack.
	refused bool
	once    sync.Once
}

// Refuse marks the message refused (no drone slot for it): its ack
// sends nothing, and the publisher keeps it.
func (m *Message) Refuse() { m.refused = true }

func (m *Message) Duplicate() bool   { return m.dup }
func (m *Message) Qos() byte         { return m.qos }
func (m *Message) Retained() bool    { return m.retained }
func (m *Message) Topic() string     { return m.topic }
func (m *Message) MessageID() uint16 { return m.id }
func (m *Message) Payload() []byte   { return m.payload }

// Ack sends the message's acknowledgement at once, once (QoS 1 and 2; a
// no-op for QoS 0 and wills). The pipeline does not call it: it acks with
// the ordered ack the message was delivered with.
func (m *Message) Ack() {
	if m.c != nil && m.qos > 0 {
		m.once.Do(func() { m.c.sendAck(mqttwire.PubAck{ID: m.id, QoS: m.qos}) })
	}
}
