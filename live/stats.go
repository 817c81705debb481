package live

import "time"

// Stats is a snapshot of the lane, served in the agent's /status.
type Stats struct {
	// ShareBytesPerSec is the lane's part of the uplink cap (0: no cap).
	ShareBytesPerSec int64 `json:"share_bytes_per_sec"`
	// EnsureErrors counts failed attempts to create the EDGELIVE stream.
	EnsureErrors uint64 `json:"ensure_errors"`
	// LastError is the latest publish or stream error; cleared once
	// every stream delivers again.
	LastError string `json:"last_error,omitempty"`
	// Streams is each stream's lane, in priority order.
	Streams []StreamStats `json:"streams"`
}

// StreamStats is one stream's lane.
type StreamStats struct {
	Stream string `json:"stream"`
	// IntervalSeconds is the least time between two values of a drone.
	IntervalSeconds float64 `json:"interval_seconds"`
	// Keyframes is set when only keyframes are sent.
	Keyframes bool `json:"keyframes,omitempty"`
	// Drones is how many drones have a latest value.
	Drones int `json:"drones"`
	// Sent and Bytes count values the centre acknowledged and their
	// bytes on the link (protocol line and headers included).
	Sent  uint64 `json:"sent"`
	Bytes uint64 `json:"bytes"`
	// PublishErrors counts publishes that failed or were not
	// acknowledged (the value stays due).
	PublishErrors uint64 `json:"publish_errors"`
	// TooLarge counts values above Config.MaxValueBytes, not sent.
	TooLarge uint64 `json:"too_large"`
	// DronesRefused counts values of drones beyond Config.MaxDrones.
	DronesRefused uint64 `json:"drones_refused"`
	// Undecodable counts video chunks whose keyframe could not be read.
	Undecodable uint64 `json:"undecodable"`
	// LastSent is when the last value acknowledged was sent (zero: never).
	LastSent time.Time `json:"last_sent,omitzero"`
	// NotDeliveringSince is set while a value is due that the lane cannot
	// send — the centre unreachable, EDGELIVE not there, a publish
	// refused or not acknowledged: since the first such moment after the
	// stream's last acknowledged value (zero while it delivers, or
	// nothing waits).
	NotDeliveringSince time.Time `json:"not_delivering_since,omitzero"`
}

// Stats returns the lane's snapshot. Safe for concurrent use.
func (l *Lane) Stats() Stats {
	l.mu.Lock()
	s := Stats{ShareBytesPerSec: l.ShareBytesPerSec(), EnsureErrors: l.ensureErrs.Load(), LastError: l.lastErr}
	l.mu.Unlock()
	for _, sl := range l.streams {
		ss := StreamStats{Stream: sl.name, IntervalSeconds: sl.cfg.Interval.Seconds(), Keyframes: sl.cfg.KeyframesOnly(),
			Drones: sl.f.drones(), Sent: sl.sent.Load(), Bytes: sl.bytes.Load(), PublishErrors: sl.pubErrs.Load(),
			TooLarge: sl.tooLarge.Load(), DronesRefused: sl.f.refused.Load(), Undecodable: sl.f.skipped.Load()}
		if ns := sl.lastSentNs.Load(); ns != 0 {
			ss.LastSent = time.Unix(0, ns)
		}
		if ns := sl.stalledNs.Load(); ns != 0 {
			ss.NotDeliveringSince = time.Unix(0, ns)
		}
		s.Streams = append(s.Streams, ss)
	}
	return s
}
