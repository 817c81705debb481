package unpack

import (
	"sync/atomic"
	"time"
)

// State is what an unpacker is doing.
type State int

const (
	// StateStarting: before the first session.
	StateStarting State = iota
	// StateActive: a session reads the source and publishes.
	StateActive
	// StateStandby: fenced by another instance; watching the derived
	// stream until it stops moving.
	StateStandby
	// StateRetrying: a session failed (no leader, a lost link); the next
	// starts after Options.RetryWait.
	StateRetrying
	// StateStopped: Run returned.
	StateStopped
	// StateBlocked: a source message does not decode (Stats.Error says
	// which); the unpacker waits there, its cursor kept, until it is
	// restarted with that sequence in Options.Skip.
	StateBlocked
)

var stateNames = [...]string{"starting", "active", "standby", "retrying", "stopped", "blocked"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "unknown"
	}
	return stateNames[s]
}

// MarshalText writes the state's name (JSON documents show names).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Stats are an unpacker's counters since it was made.
type Stats struct {
	// Stream is the local stream name.
	Stream string `json:"stream"`
	// Derived is the derived stream it writes; Partition is its index
	// of Partitions (0 of 1 without partitions).
	Derived    string `json:"derived"`
	Partition  int    `json:"partition"`
	Partitions int    `json:"partitions"`
	// State is what it does now.
	State State `json:"state"`
	// Events counts derived messages acked (markers included).
	Events uint64 `json:"events"`
	// Oversize counts events republished as markers: too large for the
	// max payload with their headers.
	Oversize uint64 `json:"oversize"`
	// Corrupt counts source messages that did not decode (the unpacker
	// stops at the first; see StateBlocked).
	Corrupt uint64 `json:"corrupt"`
	// Skipped counts undecodable source messages skipped by the operator
	// (Options.Skip), each replaced by a skip marker.
	Skipped uint64 `json:"skipped"`
	// BlockedSeq is the source sequence it is blocked at (StateBlocked).
	BlockedSeq uint64 `json:"blocked_seq,omitempty"`
	// Error is why it is blocked, or the last session's failure.
	Error string `json:"error,omitempty"`
	// OrphanParts counts part messages dropped because their commit did
	// not follow (never written by an agent; counted to be seen).
	OrphanParts uint64 `json:"orphan_parts"`
	// Fenced counts sessions that found another instance writing.
	Fenced uint64 `json:"fenced"`
	// Sessions counts sessions started.
	Sessions uint64 `json:"sessions"`
	// Failures counts the sessions failed in a row (0 once one makes
	// progress); RetryIn is the wait before the next (StateRetrying).
	Failures uint64        `json:"failures"`
	RetryIn  time.Duration `json:"retry_in_ns,omitempty"`
	// SourceSeq is the last source sequence read; DerivedSeq the last
	// derived sequence acked.
	SourceSeq  uint64 `json:"source_seq"`
	DerivedSeq uint64 `json:"derived_seq"`
}

// counters are Stats kept with atomics.
type counters struct {
	state                                                                              atomic.Int32
	events, oversize, corrupt, skipped, blocked, orphans, fenced, sessions, src, deriv atomic.Uint64
	failures                                                                           atomic.Uint64
	retryIn                                                                            atomic.Int64
	err                                                                                atomic.Pointer[string]
}
