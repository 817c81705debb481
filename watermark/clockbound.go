package watermark

import (
	"math"

	"github.com/edge-agent/edge-agent/localstream"
)

// This file bounds event time by the receiving clock (docs/design.md rule 12).
//
// An event's time t comes from the drone's clock; its ingest time i from
// the ground station's. With skew S (MaxClockSkew) and B (MaxClockBehind):
//
//	          i−B                 i            i+S
//	 ──────────┼───────────────────┼─────────────┼──────────► event time t
//	   behind  │        in bounds: mark min(t,i)  │  ahead
//	   flagged │                                  │  flagged
//	   late;   │                                  │  mark i−S
//	   mark i−B│                                  │
//
// The event keeps its own time (payload, Edge-Event-Time); what it may
// contribute to the watermark (its mark) is bounded:
//
//   - in bounds: min(t, i). No watermark is ever ahead of the receiving
//     clock, so a drone a little ahead never makes a correct one late.
//   - ahead (t > i+S): flagged clock-skew, mark i−S: a correct clock that
//     sends at the same moment stamps at least i−S, so a drone far ahead
//     never makes a correct drone late.
//   - behind (t < i−B): flagged clock-skew and late, mark i−B (its
//     position only, for the committed view). The writer is "behind" until
//     its next event in bounds: it stops holding the watermark back.
//
// A writer's marks never go back (each is at least the one admitted
// before), so a clock that jumps back and forth does not refuse marks.

// Skew says where an event time lies against the receiving clock.
type Skew uint8

const (
	// SkewNone: within [ingest − MaxClockBehind, ingest + MaxClockSkew].
	SkewNone Skew = iota
	// SkewAhead: more than MaxClockSkew after the ingest time.
	SkewAhead
	// SkewBehind: more than MaxClockBehind before the ingest time.
	SkewBehind
)

// String renders "none", "ahead" or "behind".
func (s Skew) String() string {
	switch s {
	case SkewAhead:
		return "ahead"
	case SkewBehind:
		return "behind"
	}
	return "none"
}

// noIngest is the ingest time of an event admitted without a receiving
// clock (Late): no bound applies.
const noIngest = math.MinInt64

// Admission is the tracker's verdict on one event before its append: the
// flags to set and the time the event may note after it. The zero value
// flags nothing and bounds nothing (for sources without a tracker).
type Admission struct {
	// Late: flag the event localstream.FlagLate.
	Late bool
	// Skew: the event time is outside the receiving clock's bounds; flag
	// it localstream.FlagClockSkew unless SkewNone.
	Skew Skew
	// bounded is set by Admit; capNs is then the highest mark the event
	// may contribute (see the file comment).
	bounded bool
	capNs   int64
	// floorNs is the writer's highest mark admitted before, so that its
	// marks never go back.
	floorNs int64
}

// Flags returns the event flags the admission asks for.
func (a Admission) Flags() localstream.Flags {
	var f localstream.Flags
	if a.Late {
		f |= localstream.FlagLate
	}
	if a.Skew != SkewNone {
		f |= localstream.FlagClockSkew
	}
	return f
}

// Mark returns the time to note for the admitted event whose latest time
// is t (a telemetry message's time; a video chunk's last frame): t
// bounded by the receiving clock, never below the writer's previous mark.
func (a Admission) Mark(t int64) int64 {
	if !a.bounded {
		return t
	}
	if a.Skew == SkewNone {
		t = min(t, a.capNs)
	} else {
		t = a.capNs
	}
	return max(t, a.floorNs)
}

// classify returns the admission of event time t ingested at ingest
// (before the writer's state is applied).
func (c *core) classify(t, ingest int64) Admission {
	if ingest == noIngest {
		return Admission{}
	}
	switch {
	case c.skewNs > 0 && t > ingest && t-ingest > c.skewNs:
		return Admission{Skew: SkewAhead, bounded: true, capNs: ingest - c.skewNs, floorNs: math.MinInt64}
	case c.behindNs > 0 && t < ingest && ingest-t > c.behindNs:
		return Admission{Skew: SkewBehind, Late: true, bounded: true, capNs: ingest - c.behindNs, floorNs: math.MinInt64}
	case c.skewNs > 0:
		return Admission{bounded: true, capNs: ingest, floorNs: math.MinInt64}
	}
	return Admission{}
}

// clockFloor is the lower bound a watermark follows when no writer is
// open (every one closed or behind the receiving clock, or none): the
// receiving clock minus MaxClockSkew — where a stream with one correct
// writer would be. ok is false when disabled.
func (c *core) clockFloor(now int64) (int64, bool) {
	if c.skewNs <= 0 || now <= math.MinInt64+c.skewNs {
		return 0, false
	}
	return now - c.skewNs, true
}

// anyOpen reports whether some writer may still send without notice: not
// closed and not behind the receiving clock (idle or not), or with an
// event in flight. Such a stream does not follow the clock: an idle
// writer's next events (a broker's backlog after a restart) are not made
// late by the clock alone.
func (c *core) anyOpen() bool {
	for _, w := range c.writers {
		if w.inflight || (!w.closed && !w.behind) {
			return true
		}
	}
	return false
}

// WriterSkew is one writer's clock-skew state and counters.
type WriterSkew struct {
	// Writer is the writer id.
	Writer string `json:"writer"`
	// Ahead and Behind count its events admitted ahead of or behind the
	// receiving clock's bounds (since the tracker started).
	Ahead  uint64 `json:"ahead"`
	Behind uint64 `json:"behind"`
	// IsBehind is set while its latest event was behind: it does not hold
	// the watermark back.
	IsBehind bool `json:"is_behind"`
}
