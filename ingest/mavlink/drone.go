package mavlink

import (
	"sync/atomic"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
)

// WriterFor is the watermark writer of a MAVLink drone: "mavlink/<drone>"
// (its telemetry over MQTT, if any, is "telemetry/<drone>").
func WriterFor(drone string) string { return "mavlink/" + drone }

// drone is the state of one system id holding a slot. Intake.mu guards it.
type drone struct {
	sysid       uint8
	discovered  bool // not in Config.Drones: it holds one of MaxDrones slots
	id, writer  string
	lastActive  int64        // receive time of its last frame, Unix ns
	pending     atomic.Int64 // appends queued in the store, not yet durable (the store's callback changes it without Intake.mu)
	stored      atomic.Uint64
	comps       [256]component
	rateLast    map[uint64]int64 // (compid, msgid) → receive time of the last kept, for Rates
	discontinue bool             // flag the next stored event: frames were lost before it
	// The source the system id is bound to (source.go) and the receive
	// time of its last frame from it (0: released, to be taken at once).
	src     source
	srcLast int64
	bound   bool
	st      DroneStats
}

// component is what a drone's component carries from frame to frame.
type component struct {
	seq seqTrack // its sequence numbers (sequence.go)
	// A time mapping from SYSTEM_TIME: Unix ns = offsetNs + time_boot_ms·1e6.
	mapped   bool
	offsetNs int64
	maxBoot  uint32 // the newest time_boot_ms since the mapping
}

// DroneStats are one MAVLink drone's counters.
type DroneStats struct {
	// ID and SysID name it.
	ID    string `json:"drone"`
	SysID int    `json:"sysid"`
	// Frames: frames received with a right checksum (before filters).
	Frames uint64 `json:"frames"`
	// Stored: events durable in the store.
	Stored uint64 `json:"stored"`
	// Lost: frames missing from its components' sequence numbers.
	Lost uint64 `json:"lost"`
	// Discontinuities: events flagged discontinuity (after a loss, a
	// reordered or restarted sequence, a drop by the store, and the first
	// frame of each component in a run: what came before it is unknown).
	Discontinuities uint64 `json:"discontinuities"`
	// Duplicates: copies of a frame among the last 64 of their component
	// (same sequence number and checksum): dropped.
	Duplicates uint64 `json:"duplicates"`
	// Sampled: frames dropped by Rates.
	Sampled uint64 `json:"sampled"`
	// Spoofed: frames with its system id from another source than the
	// one it is bound to, dropped; Rebinds: times another source took the
	// system id over (after RebindAfter of silence, or a closed link).
	Spoofed uint64 `json:"spoofed"`
	Rebinds uint64 `json:"rebinds"`
	// TimeMapped: events timed from the drone's clock (SYSTEM_TIME, or
	// time_boot_ms through it); TimeEstimated: timed at arrival.
	TimeMapped    uint64 `json:"time_mapped"`
	TimeEstimated uint64 `json:"time_estimated"`
	// ClockSkew: events whose time is outside the receiving clock's bounds.
	ClockSkew uint64 `json:"clock_skew"`
	// Last is the receive time of its last frame (Unix ns).
	Last int64 `json:"last_unix_ns"`
	// Vehicle is its autopilot's state, for the status page.
	Vehicle Vehicle `json:"vehicle"`
}

// slots holds the drones by system id: every mapped one, and at most
// MaxDrones discovered ones at once (n).
type slots struct {
	bySys [256]*drone
	n     int
}

// droneFor returns the drone of sysid, taking a slot for it; nil when
// the system id is no drone (unmapped with discovery off) or no slot is
// free. Intake.mu is held.
func (in *Intake) droneFor(sysid uint8, now int64) *drone {
	if d := in.slots.bySys[sysid]; d != nil {
		return d
	}
	id, mapped := in.cfg.Drones[sysid]
	if !mapped {
		if !in.cfg.Discover || sysid == 0 {
			in.c.unmapped.Add(1)
			return nil
		}
		if in.slots.n >= in.cfg.MaxDrones && !in.releaseIdle(now) {
			in.c.dronesOverLimit.Add(1)
			return nil
		}
		id = DiscoveredID(sysid)
		in.slots.n++
	}
	d := &drone{sysid: sysid, id: id, writer: WriterFor(id), lastActive: now, discovered: !mapped}
	d.st.ID, d.st.SysID, d.st.Vehicle.BatteryPct = id, int(sysid), -1
	in.slots.bySys[sysid] = d
	return d
}

// DiscoveredID is the drone id of a system id not in Config.Drones.
func DiscoveredID(sysid uint8) string {
	id, _ := telemetry.DroneID("mavlink-" + itoa(int(sysid)))
	return id
}

// releaseIdle gives back the slot of one discovered drone silent for
// DroneIdleTimeout with nothing in flight, closing its writer. Intake.mu is held.
func (in *Intake) releaseIdle(now int64) bool {
	before := now - int64(in.cfg.DroneIdleTimeout)
	for i, d := range in.slots.bySys {
		if d == nil || !d.discovered || d.pending.Load() > 0 || d.lastActive >= before {
			continue
		}
		in.slots.bySys[i] = nil
		in.slots.n--
		if in.sink.Marks != nil {
			if err := in.sink.Marks.CloseWriter(d.writer); err != nil {
				in.c.markErrors.Add(1)
			}
		}
		in.c.dronesReleased.Add(1)
		return true
	}
	return false
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

// stats is a snapshot of d's counters. Intake.mu is held.
func (d *drone) stats() DroneStats {
	s := d.st
	s.Stored = d.stored.Load()
	return s
}
