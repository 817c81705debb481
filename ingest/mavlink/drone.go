package mavlink

import (
	"sync/atomic"

	"github.com/edge-agent/edge-agent/ingest/guard"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
)

// WriterFor is the watermark writer of a MAVLink drone: "mavlink/<drone>"
// (its telemetry over MQTT, if any, is "telemetry/<drone>").
func WriterFor(drone string) string { return "mavlink/" + drone }

// drone is the state of one system id holding a slot. Intake.mu guards it.
type drone struct {
	sysid       uint8
	id, writer  string
	pending     atomic.Int64 // appends queued in the store, not yet durable (the store's callback changes it without Intake.mu)
	lastActive  int64        // receive time of its newest frame that passed the checks, Unix ns (the slots' Active)
	stored      atomic.Uint64
	comps       [256]component
	rateLast    map[uint64]int64 // (compid, msgid) → receive time of the last kept, for Rates
	discontinue bool             // flag the next stored event: frames were lost before it
	// bind binds the system id to the source of its first frame (source.go).
	bind guard.Binding[source]
	st   DroneStats
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

// newSlots is the drones' table by system id (guard.Table): every mapped
// drone pinned, and at most MaxDrones discovered ones at once; when all
// are taken, the slot of a discovered drone silent for DroneIdleTimeout
// with nothing in flight goes to a newcomer, its writer closed.
//
// The frame path reads the table through in.bySys and marks activity
// on the drone (Active), not with Peek and Touch: the table is a map,
// and a lookup by a one-byte key (no fast path in the runtime) cost ~140
// instructions, two a frame — 13 % of the frame path (BenchmarkFramePath
// under callgrind). The cost moves to a full table refusing a newcomer:
// its scan (O(MaxDrones)) is no longer skipped until an entry can have
// gone idle, as it was not before the table either (docs/benchmarks/mavlink.md).
func (in *Intake) newSlots() *guard.Table[uint8, *drone] {
	return guard.NewTable(guard.TableConfig[uint8, *drone]{
		Max: in.cfg.MaxDrones, Idle: in.cfg.DroneIdleTimeout,
		Busy:   func(_ uint8, d *drone) bool { return d.pending.Load() > 0 },
		Active: func(_ uint8, d *drone) int64 { return d.lastActive },
		Release: func(sysid uint8, d *drone) {
			in.bySys[sysid] = nil
			if in.sink.Marks != nil {
				if err := in.sink.Marks.CloseWriter(d.writer); err != nil {
					in.c.markErrors.Add(1)
				}
			}
			in.c.dronesReleased.Add(1)
		},
	})
}

// droneFor returns the drone of sysid, taking a slot for it; nil when
// the system id is no drone (unmapped with discovery off) or no slot is
// free. It does not mark the drone active: a frame that passes the
// checks does (frame). Intake.mu is held.
func (in *Intake) droneFor(sysid uint8, now int64) *drone {
	if d := in.bySys[sysid]; d != nil {
		return d
	}
	id, mapped := in.cfg.Drones[sysid]
	if !mapped && (!in.cfg.Discover || sysid == 0) {
		in.c.unmapped.Add(1)
		return nil
	}
	if !mapped {
		id = DiscoveredID(sysid)
	}
	d := &drone{sysid: sysid, id: id, writer: WriterFor(id), lastActive: now}
	d.st.ID, d.st.SysID, d.st.Vehicle.BatteryPct = id, int(sysid), -1
	if mapped {
		in.slots.Pin(sysid, d, now)
	} else if !in.slots.Add(sysid, d, now) {
		in.c.dronesOverLimit.Add(1)
		return nil
	}
	in.bySys[sysid] = d
	return d
}

// DiscoveredID is the drone id of a system id not in Config.Drones.
func DiscoveredID(sysid uint8) string {
	id, _ := telemetry.DroneID("mavlink-" + itoa(int(sysid)))
	return id
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
