package replicate

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// Outage follows the central connection: since when it is down and why,
// in words. Connect updates it from nats.go's connection handlers
// (ConnConfig.Outage), which a connection the sink replaces keeps. It is
// the agent's one record of the link: /readyz, /status and the page read
// it, never nats.go's state beside it, so that they cannot disagree.
// Safe for concurrent use; the zero value is ready.
type Outage struct {
	mu sync.Mutex
	// down is set while the connection is not up; since is when it went
	// down (or when Connect began, before a first connection); err is
	// the latest error seen meanwhile. Guarded by mu.
	down      bool
	since     time.Time
	err       error
	connected bool // it was connected at least once
}

// OutageState is a snapshot of an Outage.
type OutageState struct {
	// Down is set while the centre is unreachable.
	Down bool
	// Since is when it became unreachable (Down), or when it was last
	// reached again.
	Since time.Time
	// NeverConnected is set when it was never reached since start.
	NeverConnected bool
	// Cause says why, in words ("" when up).
	Cause string
}

// State returns the snapshot.
func (o *Outage) State() OutageState {
	if o == nil {
		return OutageState{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := OutageState{Down: o.down, Since: o.since, NeverConnected: !o.connected}
	if o.down {
		s.Cause = Cause(o.err)
	}
	return s
}

func (o *Outage) start(now time.Time) {
	o.mu.Lock()
	o.down, o.since = true, now
	o.mu.Unlock()
}

func (o *Outage) up(now time.Time) {
	o.mu.Lock()
	o.down, o.since, o.err, o.connected = false, now, nil, true
	o.mu.Unlock()
}

func (o *Outage) lost(now time.Time, err error) {
	o.mu.Lock()
	if !o.down {
		o.down, o.since = true, now
	}
	if err != nil {
		o.err = err
	}
	o.mu.Unlock()
}

// Cause names why the centre cannot be reached, in an operator's words,
// with the library's own message after it.
func Cause(err error) string {
	const unreachable = "centre unreachable"
	var ne net.Error
	var oe *net.OpError
	switch {
	case err == nil:
		return unreachable + " (no answer yet)"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return unreachable + ": the connection was closed at once (the link dropped, or a proxy or firewall in between refuses it)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return unreachable + ": nothing listens at the central address (connection refused)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return unreachable + ": no route to the centre (network down)"
	case errors.As(err, &ne) && ne.Timeout():
		return unreachable + ": no answer in time (link down or too slow)"
	case errors.Is(err, nats.ErrAuthorization), strings.Contains(strings.ToLower(err.Error()), "authorization"):
		return "centre refused the login (check credentials): " + err.Error()
	case strings.Contains(err.Error(), "tls"), strings.Contains(err.Error(), "x509"):
		return "centre unreachable: TLS failed (check the CA and certificates): " + err.Error()
	case errors.As(err, &oe), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, ErrNotConnected):
		return unreachable + " (link lost): " + err.Error()
	}
	return unreachable + ": " + err.Error()
}
