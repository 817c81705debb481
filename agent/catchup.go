package agent

import (
	"time"

	"github.com/edge-agent/edge-agent/replicate"
)

// catchUpWindow is how far back the rates of a stream's catch-up estimate
// look (history samples, one a second).
const catchUpWindow = 10 * time.Second

// CatchUp is how far a stream's backlog is behind the capture, in time
// and bytes, and when it will have caught up at the current uplink rate
// (docs/live.md). The live lane is not in it: a preview is never counted
// as replicated.
type CatchUp struct {
	// BehindSeconds is now − the committed watermark's lower bound: how
	// old the newest data is that the centre holds for certain (absent
	// before the first commit with a watermark).
	BehindSeconds *float64 `json:"behind_seconds,omitempty"`
	// BacklogEvents and BacklogBytes are the local events after the
	// committed cut and their (estimated) payload bytes.
	BacklogEvents uint64 `json:"backlog_events"`
	BacklogBytes  uint64 `json:"backlog_bytes"`
	// SendBytesPerSec is the stream's committed payload bytes a second
	// over the last 10 s; DrainBytesPerSec how fast its backlog shrank
	// (sending less capture; negative: it grows).
	SendBytesPerSec  float64 `json:"send_bytes_per_sec"`
	DrainBytesPerSec float64 `json:"drain_bytes_per_sec"`
	// ETASeconds is the backlog over the drain rate, or, for a backlog
	// that does not shrink but is sent within 2 s at the stream's rate,
	// over the send rate (keeping up); 0 when the backlog is empty; absent
	// while neither holds and whenever the stream is not replicating (not
	// catching up: an estimate needs commits, and the rates of the window
	// before a cut are not the link's now); CaughtUpAt is the time it gives.
	ETASeconds *float64  `json:"eta_seconds,omitempty"`
	CaughtUpAt time.Time `json:"caught_up_at,omitzero"`
}

// catchUp estimates a stream's catch-up from its replication stats and
// the history's last catchUpWindow.
func (a *Agent) catchUp(rs *replicate.StreamStats, now time.Time) *CatchUp {
	c := &CatchUp{BacklogEvents: rs.BacklogEvents, BacklogBytes: rs.BacklogBytes}
	if rs.WatermarkLowerNs > 0 {
		c.BehindSeconds = lagSeconds(now, rs.WatermarkLowerNs)
	}
	// Every stream by one rule: nothing is estimated while nothing
	// commits. An empty stream retrying is not caught up either: the
	// centre's watermark of it falls behind (an idle video stream said
	// "caught up in 0.0 s" 46 s into an outage).
	committing := rs.State == replicate.StateReplicating
	if committing && rs.BacklogEvents == 0 {
		zero := 0.0
		c.ETASeconds, c.CaughtUpAt = &zero, now
	}
	send, drain, ok := a.history.rates(rs.Stream, now, catchUpWindow)
	if !ok {
		return c
	}
	c.SendBytesPerSec, c.DrainBytesPerSec = send, drain
	var eta float64
	switch {
	case !committing, rs.BacklogEvents == 0:
		return c
	case drain > 0:
		eta = float64(rs.BacklogBytes) / drain
	case send > 0 && float64(rs.BacklogBytes) <= keepingUp.Seconds()*send:
		// Keeping up: what is behind is what is in flight, sent at the
		// stream's rate while new capture takes its place.
		eta = float64(rs.BacklogBytes) / send
	default:
		return c // not catching up
	}
	c.ETASeconds, c.CaughtUpAt = &eta, now.Add(time.Duration(eta*float64(time.Second)))
	return c
}

// keepingUp: a backlog the stream sends within this long at its current
// rate, not shrinking, is keeping up, not falling behind.
const keepingUp = 2 * time.Second

// rates are stream's committed bytes a second and its backlog's shrinking
// in bytes a second, from the newest sample and the newest one at least
// window older (else the oldest); ok is false with fewer than two.
func (h *history) rates(stream string, now time.Time, window time.Duration) (send, drain float64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.times)
	if n < 2 {
		return 0, 0, false
	}
	at := func(i int) (float64, streamSample) { // i-th newest
		j := (h.start + n - 1 - i + n) % n
		return h.times[j], h.rows[j][stream]
	}
	t1, s1 := at(0)
	if s1.backlogBytes == nil || s1.replicatedBytes == nil {
		return 0, 0, false
	}
	cutoff := float64(now.Add(-window).UnixNano()) / 1e9
	best := -1
	for i := 1; i < n; i++ {
		t0, s0 := at(i)
		if s0.backlogBytes == nil || s0.replicatedBytes == nil {
			break
		}
		best = i
		if t0 <= cutoff {
			break
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	t0, s0 := at(best)
	dt := t1 - t0
	if dt <= 0 {
		return 0, 0, false
	}
	send = (*s1.replicatedBytes - *s0.replicatedBytes) / dt
	drain = (*s0.backlogBytes - *s1.backlogBytes) / dt
	return max(send, 0), drain, true
}
