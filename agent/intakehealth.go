package agent

import "time"

// telemetryProblems is what keeps the telemetry intake from taking
// messages in now (refused drones, a stalled delivery, listener
// lock-outs); /healthz fails while there is one.
func (a *Agent) telemetryProblems(now time.Time) []string {
	if a.telem == nil {
		return nil
	}
	return a.telem.Problems(now)
}
