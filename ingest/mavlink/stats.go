package mavlink

import (
	"slices"
	"sync/atomic"
)

// Stats is a snapshot of the intake's counters (all since New).
type Stats struct {
	// Datagrams: UDP datagrams received; Connections: TCP connections
	// accepted or dialled; ConnectionsRefused: accepted over
	// MaxConnections, none quiet long enough to evict, and closed;
	// ConnectionsEvicted: quiet ones closed to admit a newcomer;
	// ConnectionsTimedOut: silent for TCPIdleTimeout, cut;
	// ConnectionsLost: dialled ones that ended.
	Datagrams           uint64 `json:"datagrams"`
	Connections         uint64 `json:"connections"`
	ConnectionsRefused  uint64 `json:"connections_refused"`
	ConnectionsEvicted  uint64 `json:"connections_evicted"`
	ConnectionsTimedOut uint64 `json:"connections_timed_out"`
	ConnectionsLost     uint64 `json:"connections_lost"`
	// ReadErrors: socket errors (a UDP server not up yet, a refused dial).
	ReadErrors uint64 `json:"read_errors"`
	// KernelDrops: datagrams the kernel dropped at the intake's UDP
	// sockets, their receive buffer full (SO_RXQ_OVFL; Linux): loss at the
	// intake itself, whichever drones sent them (their sequence numbers
	// count the frames per drone, in Lost). Seen with the next datagram
	// read after the drops.
	KernelDrops uint64 `json:"kernel_drops"`
	// Frames: frames with a right checksum.
	Frames uint64 `json:"frames"`
	// Stored: events durable in the store.
	Stored uint64 `json:"stored"`
	// GarbageBytes: bytes that started no frame (skipped one at a time);
	// BadCRC: frame shapes with a wrong checksum; UnknownMessage: frame
	// shapes of a message the dialect lacks (their checksum cannot be
	// checked); Truncated: datagrams or streams that ended inside a frame.
	GarbageBytes uint64 `json:"garbage_bytes"`
	// BadTlogTime: tlog stream entries whose time is not a Unix time
	// (stored without the mavlink-tlog-us header).
	BadTlogTime    uint64 `json:"bad_tlog_time"`
	BadCRC         uint64 `json:"bad_crc"`
	UnknownMessage uint64 `json:"unknown_message"`
	Truncated      uint64 `json:"truncated"`
	// Unsigned: unsigned frames dropped (signing.require); BadSignature:
	// signed frames whose signature is wrong; SignatureReplayed: signed
	// frames whose timestamp is not newer than the last of their stream.
	Unsigned          uint64 `json:"unsigned"`
	BadSignature      uint64 `json:"bad_signature"`
	SignatureReplayed uint64 `json:"signature_replayed"`
	// Unmapped: frames of system ids not in Drones, discovery off (or 0);
	// DronesOverLimit: frames of new system ids while MaxDrones held a
	// slot; DronesReleased: slots given back by idle drones.
	Unmapped        uint64 `json:"unmapped"`
	DronesOverLimit uint64 `json:"drones_over_limit"`
	DronesReleased  uint64 `json:"drones_released"`
	// Lost: frames missing from sequence numbers (all drones); Duplicates:
	// repeats dropped; Sampled: dropped by Rates.
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
	Sampled    uint64 `json:"sampled"`
	// Spoofed: frames with a drone's system id from another source than
	// the one it is bound to, dropped; Rebinds: system ids taken over by
	// another source (source.go).
	Spoofed uint64 `json:"spoofed"`
	Rebinds uint64 `json:"rebinds"`
	// Late and ClockSkew: events flagged by the watermark marks.
	Late      uint64 `json:"late"`
	ClockSkew uint64 `json:"clock_skew"`
	// DiskFullDrops: frames dropped while the store refused appends for
	// lack of space (the next stored event is flagged discontinuity);
	// StoreDrops: frames whose append failed otherwise (the intake stops).
	DiskFullDrops uint64 `json:"disk_full_drops"`
	StoreDrops    uint64 `json:"store_drops"`
	// MarkErrors: watermark notes that failed.
	MarkErrors uint64 `json:"mark_errors"`
	// Drones: the drones holding a slot, by system id.
	Drones []DroneStats `json:"drones"`
}

type counters struct {
	datagrams, connections, connectionsRefused, connectionsLost, readErrors      atomic.Uint64
	frames, stored, garbageBytes, badCRC, unknownMessage, truncated, badTlogTime atomic.Uint64
	unsigned, badSignature, signatureReplayed                                    atomic.Uint64
	unmapped, dronesOverLimit, dronesReleased                                    atomic.Uint64
	lost, duplicates, sampled, late, clockSkew, spoofed, rebinds                 atomic.Uint64
	diskFullDrops, storeDrops, markErrors                                        atomic.Uint64
	connectionsEvicted, connectionsTimedOut                                      atomic.Uint64
}

// Stats returns a snapshot of the counters and of every drone's.
func (in *Intake) Stats() Stats {
	c := &in.c
	s := Stats{Datagrams: c.datagrams.Load(), Connections: c.connections.Load(),
		ConnectionsRefused: c.connectionsRefused.Load(), ConnectionsLost: c.connectionsLost.Load(),
		ConnectionsEvicted: c.connectionsEvicted.Load(), ConnectionsTimedOut: c.connectionsTimedOut.Load(),
		ReadErrors: c.readErrors.Load(), KernelDrops: in.kernelDrops.total(), Frames: c.frames.Load(), Stored: c.stored.Load(),
		GarbageBytes: c.garbageBytes.Load(), BadTlogTime: c.badTlogTime.Load(), BadCRC: c.badCRC.Load(), UnknownMessage: c.unknownMessage.Load(),
		Truncated: c.truncated.Load(), Unsigned: c.unsigned.Load(), BadSignature: c.badSignature.Load(),
		SignatureReplayed: c.signatureReplayed.Load(), Unmapped: c.unmapped.Load(),
		DronesOverLimit: c.dronesOverLimit.Load(), DronesReleased: c.dronesReleased.Load(),
		Lost: c.lost.Load(), Duplicates: c.duplicates.Load(), Sampled: c.sampled.Load(),
		Spoofed: c.spoofed.Load(), Rebinds: c.rebinds.Load(),
		Late: c.late.Load(), ClockSkew: c.clockSkew.Load(), DiskFullDrops: c.diskFullDrops.Load(),
		StoreDrops: c.storeDrops.Load(), MarkErrors: c.markErrors.Load()}
	in.mu.Lock()
	for _, d := range in.slots.All() {
		s.Drones = append(s.Drones, d.stats())
	}
	in.mu.Unlock()
	slices.SortFunc(s.Drones, func(a, b DroneStats) int { return a.SysID - b.SysID })
	return s
}

// Drone returns the counters of the drone holding sysid's slot.
func (s Stats) Drone(sysid uint8) (DroneStats, bool) {
	i := slices.IndexFunc(s.Drones, func(d DroneStats) bool { return d.SysID == int(sysid) })
	if i < 0 {
		return DroneStats{}, false
	}
	return s.Drones[i], true
}

// dropCounts are the counts the drop report logs.
type dropCounts struct {
	garbage, badCRC, unknown, unsigned, badSig, replayed, unmapped, overLimit, lost, diskFull, kernel, spoofed uint64
}

func (in *Intake) drops() dropCounts {
	c := &in.c
	return dropCounts{c.garbageBytes.Load(), c.badCRC.Load(), c.unknownMessage.Load(), c.unsigned.Load(),
		c.badSignature.Load(), c.signatureReplayed.Load(), c.unmapped.Load(), c.dronesOverLimit.Load(),
		c.lost.Load(), c.diskFullDrops.Load(), in.kernelDrops.total(), c.spoofed.Load()}
}

// reportDrops logs what was dropped since the last report (droplog bounds it).
func (in *Intake) reportDrops(now, last dropCounts) {
	in.cfg.Logger.Warn("mavlink: frames dropped or lost",
		"garbage_bytes", now.garbage-last.garbage, "bad_crc", now.badCRC-last.badCRC,
		"unknown_message", now.unknown-last.unknown, "unsigned", now.unsigned-last.unsigned,
		"bad_signature", now.badSig-last.badSig, "signature_replayed", now.replayed-last.replayed,
		"unmapped", now.unmapped-last.unmapped, "drones_over_limit", now.overLimit-last.overLimit,
		"lost", now.lost-last.lost, "disk_full_drops", now.diskFull-last.diskFull,
		"kernel_drops", now.kernel-last.kernel, "spoofed", now.spoofed-last.spoofed)
}
