package replicate

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// State is where a stream's replication is. Its text form (JSON, /status,
// logs) is the lower-case name.
type State int

const (
	// StateStarting: the replicator has not read the centre yet.
	StateStarting State = iota
	// StateReplicating: the last transaction or resume succeeded.
	StateReplicating
	// StateRetrying: the last attempt failed with a retryable error; the
	// replicator resumes from the centre after a back-off.
	StateRetrying
	// StateStopped: a permanent error stopped the stream (fenced, twin,
	// misconfigured); Stopped says why.
	StateStopped
)

var stateNames = [...]string{"starting", "replicating", "retrying", "stopped"}

// String is the state's name.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// MarshalText makes the JSON form the name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name written by MarshalText.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("replicate: unknown replication state %q", b)
}

// StreamStats is a snapshot of one stream's replication, in flight terms.
type StreamStats struct {
	// Stream is the local stream; Priority its uplink priority.
	Stream   string `json:"stream"`
	Priority int    `json:"priority"`
	// State is where replication is.
	State State `json:"state"`
	// Txns, Events and Bytes were committed by this run.
	Txns   uint64 `json:"txns"`
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
	// Retries counts resumes after errors; Conflicts those caused by a
	// failed fencing expectation; Adopted foreign commits taken over.
	Retries   uint64 `json:"retries"`
	Conflicts uint64 `json:"conflicts"`
	Adopted   uint64 `json:"adopted"`
	// WatermarkFallbacks counts commits that carried the previous
	// watermark because the tracker had published one for a later cut of
	// a transaction that failed.
	WatermarkFallbacks uint64 `json:"watermark_fallbacks"`
	// LateFlagged counts events sent flagged late because their time is
	// below the committed watermark they land after (a taken-over
	// chain's watermark ahead of this store's backlog).
	LateFlagged uint64 `json:"late_flagged"`
	// LastTxn and LastSeq identify the latest known commit at the centre.
	LastTxn uint64 `json:"last_txn"`
	LastSeq uint64 `json:"last_seq"`
	// CommittedCut is the latest committed cut (text form).
	CommittedCut string `json:"committed_cut"`
	// WatermarkLowerNs/UpperNs are the latest committed watermark.
	WatermarkLowerNs int64 `json:"watermark_lower_ns"`
	WatermarkUpperNs int64 `json:"watermark_upper_ns"`
	// EventTimeLag is now − committed watermark lower (0 when unknown).
	EventTimeLag time.Duration `json:"event_time_lag_ns"`
	// BacklogEvents is the number of local events after the committed cut
	// (this run's last commit, or the point its resume decision sends
	// after); BacklogBytes their payload bytes (estimated from segment
	// averages).
	BacklogEvents uint64 `json:"backlog_events"`
	BacklogBytes  uint64 `json:"backlog_bytes"`
	// Store is the local store identity, Station the station's ("":
	// unknown); EpochBase the base its positions are sent under (central
	// segment id = local + EpochBase<<32), from the resume decision on:
	// a new base shows before the first commit under it lands.
	Store     string `json:"store"`
	Station   string `json:"station,omitempty"`
	EpochBase uint32 `json:"epoch_base,omitempty"`
	// LostRanges counts losses found at resume (each a gap marker in a
	// commit record); CentralRewinds counts resumes from a central cut
	// behind what this store had committed (the centre lost its tail).
	LostRanges     uint64 `json:"lost_ranges"`
	CentralRewinds uint64 `json:"central_rewinds"`
	// LastLoss describes the latest loss (empty: none since start).
	LastLoss string `json:"last_loss,omitempty"`
	// Dropped counts events replaced at the centre by a marker.
	Dropped uint64 `json:"dropped"`
	// RepeatsDropped counts events marked by their intake as redeliveries
	// that were not sent because their first copy is at the centre: a
	// lost state's events delivered again (repeats.go). RepeatsKnown is
	// how many identities the last rebase read back from the centre's
	// tail.
	RepeatsDropped uint64 `json:"repeats_dropped"`
	RepeatsKnown   uint64 `json:"repeats_known"`
	// Limits are the centre's limits the stream works within.
	Limits Limits `json:"limits"`
	// FailingSince is set while events wait and the stream has had errors
	// and no commit since then (zero otherwise).
	FailingSince time.Time `json:"failing_since,omitzero"`
	// LastError is the latest error; Stopped holds the permanent one.
	LastError string `json:"last_error,omitempty"`
	Stopped   string `json:"stopped,omitempty"`
	// LastErrorEnded is when replication read the centre again after
	// LastError: the error is past (zero while it is current).
	LastErrorEnded time.Time `json:"last_error_ended,omitzero"`
	// LastErrorDisconnected is set when LastError is the connection's
	// being down (ErrNotConnected), not the stream's own.
	LastErrorDisconnected bool `json:"last_error_disconnected,omitempty"`
	// WireRatio is what the stream's packs take on the wire per byte of
	// (payload + 256 an event), learned from its last commits (0: not
	// yet); the uplink cap is charged with those bytes.
	WireRatio float64 `json:"wire_ratio,omitempty"`
}

// Stats returns the replicator's snapshot. Safe for concurrent use.
func (r *Replicator) Stats() StreamStats {
	r.mu.Lock()
	last, state, lastErr, stopErr, lastLoss := r.last, r.state, r.lastErr, r.stopErr, r.lastLoss
	failingSince, errEnded, sending := r.failingSince, r.errEnded, r.sending
	r.mu.Unlock()
	s := StreamStats{
		Stream: r.st.Name(), Priority: *r.cfg.Priority, State: state,
		Txns: r.txns.Load(), Events: r.events.Load(), Bytes: r.bytes.Load(),
		Retries: r.retries.Load(), Conflicts: r.conflicts.Load(), Adopted: r.adopted.Load(),
		WatermarkFallbacks: r.wmRegressed.Load(), LateFlagged: r.lateFlagged.Load(), Dropped: r.dropped.Load(), Limits: r.sink.Limits(),
		RepeatsDropped: r.repeatsDropped.Load(), RepeatsKnown: r.repeatsKnown.Load(),
		Store: r.store, Station: r.cfg.Station, EpochBase: last.Record.EpochBase,
		LostRanges: r.lost.Load(), CentralRewinds: r.rewinds.Load(), LastLoss: lastLoss,
		LastTxn: last.Record.Txn, LastSeq: last.Seq, CommittedCut: last.Record.CutText,
		WatermarkLowerNs: last.Record.Watermark.LowerNs, WatermarkUpperNs: last.Record.Watermark.UpperNs,
	}
	if lastErr != nil {
		s.LastError, s.LastErrorEnded = lastErr.Error(), errEnded
		s.LastErrorDisconnected = errors.Is(lastErr, ErrNotConnected)
	}
	s.WireRatio = math.Float64frombits(r.wireRatio.Load())
	if stopErr != nil {
		s.Stopped = stopErr.Error()
	}
	if s.WatermarkLowerNs > 0 {
		s.EventTimeLag = r.cfg.Now().Sub(time.Unix(0, s.WatermarkLowerNs))
	}
	topo := r.st.Topology()
	cut, ok := r.localCut(last)
	if sending.decided {
		// The base and the cut of this run's decision or last commit:
		// the chain's last record may be another run's under the old
		// base (a rebase whose first commit is not acked yet).
		cut, ok, s.EpochBase = sending.cut, true, sending.base
	}
	if !ok {
		cut = r.st.HeadCut()
	}
	s.BacklogEvents, s.BacklogBytes = Backlog(topo, cut)
	if s.BacklogEvents > 0 {
		s.FailingSince = failingSince
	}
	return s
}

// Backlog counts the events of topo after cut, and estimates their bytes
// from each segment's average event size.
func Backlog(topo localstream.Topology, cut localstream.StreamCut) (events, bytes uint64) {
	if topo.Validate(cut) != nil {
		return 0, 0
	}
	for id, seg := range topo.Segments {
		var n uint64
		if off, in := cut.Positions[id]; in {
			n = seg.Length - min(off, seg.Length)
		} else if seg.Length > seg.Start {
			before, err := topo.Contains(cut, localstream.Position{Segment: id, Offset: seg.Start})
			if err != nil || before {
				continue
			}
			n = seg.Length - seg.Start
		}
		events += n
		if seg.Length > 0 {
			bytes += seg.Bytes / seg.Length * n
		}
	}
	return events, bytes
}

// Problem says why the stream does not replicate, or "" when it does: it
// stopped on a permanent error, or it has had errors and no commit for
// longer than after while events wait (an uplink outage too: the caller
// decides whether that counts).
func (s StreamStats) Problem(now time.Time, after time.Duration) string {
	switch {
	case s.Stopped != "":
		return "stream " + s.Stream + " stopped: " + s.Stopped
	case !s.FailingSince.IsZero() && now.Sub(s.FailingSince) > after:
		return fmt.Sprintf("stream %s: no commit for %s with %d events waiting: %s", s.Stream,
			now.Sub(s.FailingSince).Round(time.Second), s.BacklogEvents, s.LastError)
	}
	return ""
}
