package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Readiness (/readyz) is about the centre, health (/healthz) about the
// agent itself. Capturing through an outage is the agent's normal life, so
// /healthz stays 200 while the centre is away; an operator still needs to
// see a central URL that was never reached (a typo, a firewall, wrong
// credentials) and an outage that has outlasted what the site expects.
// /readyz is 503 with the reason in both cases, and whenever /healthz is.

// centreLinkEvery is how often the central connection's state is read.
const centreLinkEvery = 250 * time.Millisecond

// centreLink follows the central connection: when it was first up and
// since when it has been down. It reads the connection's state on a
// ticker rather than through nats.go's handlers because the connection is
// replaced when it closes for good (centralConn). Safe for concurrent
// use.
type centreLink struct {
	mu sync.Mutex
	// start is when watching began (the agent's run).
	start time.Time
	// firstUp is when the connection was first seen up; zero: never.
	firstUp time.Time
	// downSince is when it was first seen down after being up; zero
	// while up (or never up).
	downSince time.Time
	// lastErr is the last error reaching the centre (nats.go's, or a
	// failed attempt's), kept until an outage ends.
	lastErr string
}

// observe records the connection's state at now.
func (l *centreLink) observe(now time.Time, up bool, lastErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() {
		l.start = now
	}
	switch {
	case up:
		if l.firstUp.IsZero() {
			l.firstUp = now
		}
		if !l.downSince.IsZero() {
			l.lastErr = ""
		}
		l.downSince = time.Time{}
	default:
		if !l.firstUp.IsZero() && l.downSince.IsZero() {
			l.downSince = now
		}
		// A failed attempt's error (failed) says more than nats.go's
		// own ("no servers available for connection").
		if lastErr != nil && !errors.Is(lastErr, nats.ErrNoServers) && l.lastErr == "" {
			l.lastErr = lastErr.Error()
		}
	}
}

// failed records err, a failed attempt to reach the centre, as the
// reason while it is down (replicate.ConnConfig.OnReconnectError).
func (l *centreLink) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.lastErr = err.Error()
	}
}

// problem says why the agent is not ready at now ("" when it is): the
// centre never reached, or away for longer than bound.
func (l *centreLink) problem(now time.Time, bound time.Duration, urls string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	reason := ""
	if l.lastErr != "" {
		reason = ": " + l.lastErr
	}
	switch {
	case l.start.IsZero():
		return "central: connection not watched yet"
	case l.firstUp.IsZero():
		return fmt.Sprintf("central: never reached since the agent started %s ago (%s)%s",
			now.Sub(l.start).Round(time.Second), urls, reason)
	case !l.downSince.IsZero() && now.Sub(l.downSince) > bound:
		return fmt.Sprintf("central: unreachable since %s (%s, longer than central.unready_after %s; %s)%s",
			l.downSince.UTC().Format(time.RFC3339), now.Sub(l.downSince).Round(time.Second), bound, urls, reason)
	}
	return ""
}

// watchCentre reads the central connection's state every centreLinkEvery
// until ctx ends.
func (a *Agent) watchCentre(ctx context.Context) error {
	t := time.NewTicker(centreLinkEvery)
	defer t.Stop()
	for {
		if nc := a.centralConn(); nc != nil {
			a.centre.observe(time.Now(), nc.Status() == nats.CONNECTED, nc.LastError())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// readinessProblem says why /readyz fails ("" when ready): no central
// configured is ready (nothing to reach).
func (a *Agent) readinessProblem(now time.Time) string {
	if a.centralConn() == nil {
		return ""
	}
	return a.centre.problem(now, a.cfg.Central.UnreadyAfter, a.CentralURL())
}

// aliveWithin is how recent the agent's last history sample must be for
// Alive: a few of historyEvery, so that a loaded machine's late tick is
// no hang.
const aliveWithin = 10 * historyEvery

// Alive reports whether the agent's own loops are moving (for systemd's
// watchdog): its history sampler, which reads every stream's watermarks
// and replication state each historyEvery, sampled within aliveWithin. A
// deadlock in those parts stops it. Safe for concurrent use.
func (a *Agent) Alive(now time.Time) error {
	last := a.lastSample.Load()
	if last == 0 {
		return errors.New("agent: not sampled yet")
	}
	if d := now.Sub(time.Unix(0, last)); d > aliveWithin {
		return fmt.Errorf("agent: no history sample for %s (want one every %s)", d.Round(time.Second), historyEvery)
	}
	return nil
}
