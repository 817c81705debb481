package telemetry

import (
	"fmt"
	"time"
)

// Health bounds: a refusal is reported for refusedReport after it, a
// delivery waiting for lane space is reported once it waited stallAfter.
const (
	refusedReport = time.Minute
	stallAfter    = 10 * time.Second
)

// Problems says what keeps telemetry from being taken in now, one line
// each with the setting to look at; nil when nothing does. The agent's
// /healthz fails while there is one. Safe for concurrent use.
func (in *Ingester) Problems(now time.Time) []string {
	var out []string
	t := now.UnixNano()
	if at := in.refusedAt.Load(); at != 0 && t-at < int64(refusedReport) {
		out = append(out, fmt.Sprintf("new drones refused %s ago (drones_over_limit %d): all max_drones %d slots are held by active drones; raise telemetry.max_drones or find the client publishing new drone ids",
			time.Duration(t-at).Round(time.Second), in.c.dronesOverLimit.Load(), in.cfg.MaxDrones))
	}
	if in.listener != nil {
		if p := in.listener.Problem(now, refusedReport); p != "" {
			out = append(out, p)
		}
	}
	if since := in.waitingSince.Load(); since != 0 && t-since >= int64(stallAfter) {
		out = append(out, fmt.Sprintf("delivery stalled for %s: the lanes are full (telemetry.lane_depth %d) and the store does not keep up",
			time.Duration(t-since).Round(time.Second), in.cfg.LaneDepth))
	}
	return out
}
