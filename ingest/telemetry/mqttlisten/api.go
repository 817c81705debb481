package mqttlisten

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
)

// ErrListen: the listen address cannot be bound (in use, not local).
var ErrListen = errors.New("telemetry: listen")

// Config configures a Listener. The telemetry package fills it from its
// own Config (listen, max_connections, ...), defaults applied; every field
// is required.
type Config struct {
	// Addr is the HOST:PORT to listen on.
	Addr string
	// MaxConnections bounds the open connections; MaxConnectionsPerSource
	// those from one IP; MaxUnconnected those that sent no CONNECT yet.
	MaxConnections, MaxConnectionsPerSource, MaxUnconnected int
	// ConnectTimeout is how long a connection may take to send CONNECT.
	ConnectTimeout time.Duration
	// MaxKeepAlive caps (and replaces 0 as) the keep-alive a client asks for.
	MaxKeepAlive time.Duration
	// MaxPayload is the largest payload delivered; a packet's remaining
	// length above it plus a topic's overhead closes the connection.
	MaxPayload int
	// Meta holds the persistent sessions' dedup entries.
	Meta dedup.SessionMeta
	// Logger receives the listener's logs; Now is its clock.
	Logger *slog.Logger
	Now    func() time.Time
}

// Pipeline is what a Listener delivers into: the telemetry Ingester's
// lanes, store and acks. It is the listener's whole view of the ingest.
type Pipeline interface {
	// Reserve takes m's bytes of the pipeline's memory budget before m is
	// delivered (nothing acks it before), waiting while the budget is
	// spent — the connection is not read meanwhile, TCP pushes back on
	// the publisher; false: the pipeline is stopping, and m is neither
	// delivered nor acknowledged (the publisher sends it again).
	Reserve(m *Message) bool
	// Deliver hands m over, in its connection's order (one connection's
	// messages are delivered by one goroutine, one at a time). The
	// pipeline calls ack once m is durable, or dropped by policy (never
	// for a refused m: see Message.Refuse); d keeps m's dedup entry (nil:
	// none, QoS 0 or a clean session).
	Deliver(m *Message, ack func(), d dedup.Source)
	// Fail stops the pipeline with a store error (a clean session's
	// entries could not be deleted).
	Fail(err error)
}

// Stats are the listener's counters. Safe for concurrent use.
type Stats struct {
	// Connections is the number open now.
	Connections int64
	// Accepted, Refused (MaxConnections), SourceRefused
	// (MaxConnectionsPerSource), UnconnectedEvicted (MaxUnconnected):
	// connections taken in or turned away.
	Accepted, Refused, SourceRefused, UnconnectedEvicted uint64
	// Connects accepted; ConnectRefused with a CONNACK refusal code;
	// ConnectTimeouts without a CONNECT in time.
	Connects, ConnectRefused, ConnectTimeouts uint64
	// Why connections ended: KeepAliveTimeouts, ProtocolErrors, TooLarge
	// (a remaining length over the bound), SlowReaders (unread acks),
	// Disconnects (DISCONNECT), Lost (EOF, reset), Takeovers (the same
	// client id connected again).
	KeepAliveTimeouts, ProtocolErrors, TooLarge, SlowReaders, Disconnects, Lost, Takeovers uint64
	// Wills delivered; SubscribeRefused SUBSCRIBEs; QoS2 PUBLISHes.
	Wills, SubscribeRefused, QoS2 uint64
	// DedupErrors: a session's entries could not be read or collected;
	// DedupCollected: superseded entries deleted.
	DedupErrors, DedupCollected uint64
}

// counters are the live Stats.
type counters struct {
	Connections                                                           atomic.Int64
	Accepted, Refused, SourceRefused, UnconnectedEvicted                  atomic.Uint64
	Connects, ConnectRefused, ConnectTimeouts                             atomic.Uint64
	KeepAliveTimeouts, ProtocolErrors, TooLarge, SlowReaders, Disconnects atomic.Uint64
	Lost, Takeovers, Wills, SubscribeRefused, QoS2                        atomic.Uint64
	DedupErrors, DedupCollected                                           atomic.Uint64
}

// Stats returns the counters.
func (l *Listener) Stats() Stats {
	c := &l.c
	return Stats{
		Connections: c.Connections.Load(), Accepted: c.Accepted.Load(), Refused: c.Refused.Load(),
		SourceRefused: c.SourceRefused.Load(), UnconnectedEvicted: c.UnconnectedEvicted.Load(),
		Connects: c.Connects.Load(), ConnectRefused: c.ConnectRefused.Load(), ConnectTimeouts: c.ConnectTimeouts.Load(),
		KeepAliveTimeouts: c.KeepAliveTimeouts.Load(), ProtocolErrors: c.ProtocolErrors.Load(), TooLarge: c.TooLarge.Load(),
		SlowReaders: c.SlowReaders.Load(), Disconnects: c.Disconnects.Load(), Lost: c.Lost.Load(), Takeovers: c.Takeovers.Load(),
		Wills: c.Wills.Load(), SubscribeRefused: c.SubscribeRefused.Load(), QoS2: c.QoS2.Load(),
		DedupErrors: c.DedupErrors.Load(), DedupCollected: c.DedupCollected.Load(),
	}
}

// lockout is the last connection the listener turned away, and why.
type lockout struct {
	at  int64 // Unix ns
	why string
}

// noteLockout records that a connection was turned away (logged by the
// ingest's drop report from the counters, reported by Problem).
func (l *Listener) noteLockout(why string) {
	l.lastLockout.Store(&lockout{at: l.cfg.Now().UnixNano(), why: why})
}

// Problem describes the last connection turned away if that was within
// recent before now, with the counters to look at; "" otherwise.
func (l *Listener) Problem(now time.Time, recent time.Duration) string {
	lo := l.lastLockout.Load()
	t := now.UnixNano()
	if lo == nil || t-lo.at >= int64(recent) {
		return ""
	}
	return fmt.Sprintf("%s (%s ago; listener_refused %d, listener_source_refused %d, listener_unconnected_evicted %d)",
		lo.why, time.Duration(t-lo.at).Round(time.Second), l.c.Refused.Load(), l.c.SourceRefused.Load(), l.c.UnconnectedEvicted.Load())
}
