package agent

import (
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/replicate"
)

// UplinkStatus is the link to the centre in /status: the cap and its real
// use on the wire, the backlog over all streams, and the outage — since
// when, why in words, and when the backlog will be at the centre.
type UplinkStatus struct {
	// CapBytesPerSec is central.uplink_bytes_per_sec (0: unlimited).
	CapBytesPerSec int64 `json:"cap_bytes_per_sec"`
	// SentBytes are the bytes written to the central connection, as on
	// the wire (compressed packs, protocol, live lane): what the cap is
	// charged with.
	SentBytes int64 `json:"sent_bytes"`
	// SendBytesPerSec is that over the last 10 s; CapUse its part of the
	// cap (absent without a cap).
	SendBytesPerSec float64  `json:"send_bytes_per_sec"`
	CapUse          *float64 `json:"cap_use,omitempty"`
	// BacklogEvents and BacklogBytes are the events waiting in every
	// stream and their payload; BacklogWireBytes what they are expected
	// to take on the wire (each stream's packs' ratio).
	BacklogEvents    uint64  `json:"backlog_events"`
	BacklogBytes     uint64  `json:"backlog_bytes"`
	BacklogWireBytes float64 `json:"backlog_wire_bytes"`
	// Down is set while the centre is unreachable: since DownSince
	// (DownSeconds), for Cause. NeverConnected: not once since start.
	Down           bool      `json:"down"`
	DownSince      time.Time `json:"down_since,omitzero"`
	DownSeconds    *float64  `json:"down_seconds,omitempty"`
	NeverConnected bool      `json:"never_connected,omitempty"`
	Cause          string    `json:"cause,omitempty"`
	// ETASeconds is when the whole backlog will be at the centre: its
	// wire bytes over how fast they shrank in the last 10 s while sent
	// (ETABasis "current rate"; a backlog sent within 2 s that does not
	// shrink keeps up), or, while nothing is sent (down, or not started),
	// over the cap less what capture adds ("cap"; absent without one).
	// Absent while capture outpaces the link: the backlog grows, it is
	// not catching up. 0 when nothing waits.
	ETASeconds *float64  `json:"eta_seconds,omitempty"`
	ETABasis   string    `json:"eta_basis,omitempty"`
	CompleteAt time.Time `json:"complete_at,omitzero"`
}

// wireRate keeps the last samples of the uplink's sent bytes, one a
// history tick, for the send rate. Safe for concurrent use.
type wireRate struct {
	mu sync.Mutex
	at []time.Time // oldest first, at most wireRateSamples
	n  []int64
}

const wireRateSamples = 11 // 10 s at one a second

func (w *wireRate) add(t time.Time, sent int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at, w.n = append(w.at, t), append(w.n, sent)
	if len(w.at) > wireRateSamples {
		w.at, w.n = w.at[1:], w.n[1:]
	}
}

// rate is bytes a second between the oldest sample at or after since
// and the newest: a rate of the link as it is now, not averaged with an
// outage that just ended.
func (w *wireRate) rate(since time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := 0
	for i < len(w.at) && w.at[i].Before(since) {
		i++
	}
	if len(w.at)-i < 2 {
		return 0
	}
	dt := w.at[len(w.at)-1].Sub(w.at[i]).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(w.n[len(w.n)-1]-w.n[i]) / dt
}

// uplinkStatus assembles UplinkStatus (nil without central) from o, the
// status's snapshot of the central connection.
func (a *Agent) uplinkStatus(now time.Time, o replicate.OutageState, repl map[string]*replicate.StreamStats) *UplinkStatus {
	if a.uplink == nil {
		return nil
	}
	u := &UplinkStatus{CapBytesPerSec: a.uplink.BytesPerSec(), SentBytes: a.uplink.Sent()}
	if !o.Down {
		u.SendBytesPerSec = a.wire.rate(o.Since)
	}
	if u.CapBytesPerSec > 0 {
		use := u.SendBytesPerSec / float64(u.CapBytesPerSec)
		u.CapUse = &use
	}
	// inflow and drain are what capture adds to the backlog and how fast
	// it shrinks, in wire bytes a second over each stream's last
	// catchUpWindow (the rates its row's "caught up in" uses); known once
	// every stream has them.
	var inflow, drain float64
	known := len(repl) > 0
	for _, rs := range repl {
		u.BacklogEvents += rs.BacklogEvents
		u.BacklogBytes += rs.BacklogBytes
		ratio := rs.WireRatio
		if ratio <= 0 {
			ratio = 1
		}
		wire := (float64(rs.BacklogBytes) + 256*float64(rs.BacklogEvents)) * ratio
		u.BacklogWireBytes += wire
		send, d, ok := a.history.rates(rs.Stream, now, catchUpWindow)
		if !ok {
			known = false
			continue
		}
		perByte := ratio // wire bytes a payload byte, with the per-event overhead
		if rs.BacklogBytes > 0 {
			perByte = wire / float64(rs.BacklogBytes)
		}
		inflow += (send - d) * perByte
		drain += d * perByte
	}
	u.Down, u.NeverConnected, u.Cause = o.Down, o.NeverConnected && o.Down, o.Cause
	if o.Down {
		u.DownSince = o.Since
		d := now.Sub(o.Since).Seconds()
		u.DownSeconds = &d
	}
	eta, basis, ok := uplinkETA(u, o.Down, known, inflow, drain)
	if !ok {
		return u // not catching up, or nothing to reckon it by
	}
	u.ETASeconds, u.ETABasis, u.CompleteAt = &eta, basis, now.Add(time.Duration(eta*float64(time.Second)))
	return u
}

// uplinkETA is when u's backlog will be at the centre and what that is
// reckoned at (see UplinkStatus.ETASeconds; none when nothing waits);
// ok is false when there is no estimate. Without known rates (the first
// second) it is the backlog over the send rate or the cap. Capture
// counts: a backlog that grows at the rate sent now, or would at the
// cap, is never "complete in" a time (it said 97 s, then 153 s, while
// video captured at 230 kB/s over a 50 kB/s cap grew it and the video
// row said "not catching up").
func uplinkETA(u *UplinkStatus, down, known bool, inflow, drain float64) (eta float64, basis string, ok bool) {
	b := u.BacklogWireBytes
	switch {
	case u.BacklogEvents == 0:
		return 0, "", true
	case !down && u.SendBytesPerSec > 0:
		switch {
		case !known, b <= keepingUp.Seconds()*u.SendBytesPerSec: // in flight: keeping up
			return b / u.SendBytesPerSec, "current rate", true
		case drain > 0:
			return b / drain, "current rate", true
		}
	case u.CapBytesPerSec > 0:
		rate := float64(u.CapBytesPerSec)
		if known {
			rate -= inflow
		}
		if rate > 0 {
			return b / rate, "cap", true
		}
	}
	return 0, "", false
}
