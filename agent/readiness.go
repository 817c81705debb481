package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/edge-agent/edge-agent/replicate"
)

// Readiness (/readyz) is about the centre, health (/healthz) about the
// agent itself. Capturing through an outage is the agent's normal life, so
// /healthz stays 200 while the centre is away; an operator still needs to
// see a central URL that was never reached (a typo, a firewall, wrong
// credentials) and an outage that has outlasted what the site expects.
// /readyz is 503 with the reason in both cases, and whenever /healthz is.

// centreProblem says why the agent is not ready at now ("" when it is),
// from o, the one record of the central connection (replicate.Outage:
// /status's uplink, its errors and the page read the same): the centre
// never reached, or away for longer than bound.
func centreProblem(o replicate.OutageState, now time.Time, bound time.Duration, urls string) string {
	switch {
	case !o.Down:
		return ""
	case o.NeverConnected:
		return fmt.Sprintf("central: never reached since the agent started %s ago (%s): %s",
			now.Sub(o.Since).Round(time.Second), urls, o.Cause)
	case now.Sub(o.Since) > bound:
		return fmt.Sprintf("central: unreachable since %s (%s, longer than central.unready_after %s; %s): %s",
			o.Since.UTC().Format(time.RFC3339), now.Sub(o.Since).Round(time.Second), bound, urls, o.Cause)
	}
	return ""
}

// readinessProblem says why /readyz fails ("" when ready): no central
// configured is ready (nothing to reach).
func (a *Agent) readinessProblem(now time.Time) string {
	if a.centralConn() == nil {
		return ""
	}
	return centreProblem(a.outage.State(), now, a.cfg.Central.UnreadyAfter, a.CentralURL())
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
