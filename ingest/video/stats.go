package video

import "sync/atomic"

// droneCounters are one drone's counters; written by its goroutine, read by Stats.
type droneCounters struct {
	packets, bytes      atomic.Uint64
	queueDrops          atomic.Uint64
	malformed           atomic.Uint64
	malformedPayload    atomic.Uint64
	lost, late          atomic.Uint64
	duplicates          atomic.Uint64
	reordered, seqJumps atomic.Uint64
	framesOut           atomic.Uint64
	framesDropped       atomic.Uint64
	framesSkipped       atomic.Uint64
	framesTooLarge      atomic.Uint64
	keyframesNoParams   atomic.Uint64
	chunks, chunkBytes  atomic.Uint64
	lateChunks          atomic.Uint64
	appendErrors        atomic.Uint64
	rawPackets          atomic.Uint64
	rtcp, senderReports atomic.Uint64
	malformedRTCP       atomic.Uint64
	clockJumps          atomic.Uint64
	clockSkewChunks     atomic.Uint64
	srSkewed            atomic.Uint64
	ssrcChanges         atomic.Uint64
	spoofed, rebinds    atomic.Uint64
	discontinuities     atomic.Uint64
}

// DroneStats is a snapshot of one drone's counters.
type DroneStats struct {
	// Packets and Bytes are RTP datagrams routed to the drone.
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// QueueDrops are packets dropped because the drone's queue was full.
	QueueDrops uint64 `json:"queue_drops"`
	// Malformed are RTP packets pion could not parse.
	Malformed uint64 `json:"malformed"`
	// MalformedPayload are payloads the depacketizer rejected (frame dropped).
	MalformedPayload uint64 `json:"malformed_payload"`
	// Lost are sequence numbers declared lost; Late arrived after their gap
	// was given up; Duplicates were already delivered or buffered;
	// Reordered waited in the reorder buffer; SeqJumps are restarts of the
	// sequence numbering.
	Lost       uint64 `json:"lost"`
	Late       uint64 `json:"late"`
	Duplicates uint64 `json:"duplicates"`
	Reordered  uint64 `json:"reordered"`
	SeqJumps   uint64 `json:"seq_jumps"`
	// FramesOut are frames appended in chunks; FramesDropped were incomplete
	// or corrupt; FramesSkipped were whole but followed a loss before the
	// next keyframe; FramesTooLarge exceeded chunk_max_bytes.
	FramesOut      uint64 `json:"frames_out"`
	FramesDropped  uint64 `json:"frames_dropped"`
	FramesSkipped  uint64 `json:"frames_skipped"`
	FramesTooLarge uint64 `json:"frames_too_large"`
	// KeyframesNoParams are keyframes stored without SPS/PPS(/VPS) (none known yet).
	KeyframesNoParams uint64 `json:"keyframes_no_params"`
	// Chunks and ChunkBytes were appended durably; LateChunks were flagged late.
	Chunks     uint64 `json:"chunks"`
	ChunkBytes uint64 `json:"chunk_bytes"`
	LateChunks uint64 `json:"late_chunks"`
	// AppendErrors are chunks the store refused (lost, next chunk flagged).
	AppendErrors uint64 `json:"append_errors"`
	// RawPackets are packets of unknown payload types stored raw.
	RawPackets uint64 `json:"raw_packets"`
	// RTCP packets, SenderReports among them, MalformedRTCP rejected.
	RTCP          uint64 `json:"rtcp"`
	SenderReports uint64 `json:"sender_reports"`
	MalformedRTCP uint64 `json:"malformed_rtcp"`
	// ClockJumps are RTP→wall-clock mapping jumps beyond max_clock_jump.
	ClockJumps uint64 `json:"clock_jumps"`
	// ClockSkewChunks are chunks whose time is outside the receiving
	// clock's bounds (flagged clock-skew). SRSkewed are sender reports
	// whose NTP time was outside them while the mapping in use was
	// within: ignored (the mapping in use continues).
	ClockSkewChunks uint64 `json:"clock_skew_chunks"`
	SRSkewed        uint64 `json:"sr_skewed"`
	// SSRCChanges are new SSRCs taking over the drone.
	SSRCChanges uint64 `json:"ssrc_changes"`
	// Discontinuities are chunks flagged FlagDiscontinuity.
	Discontinuities uint64 `json:"discontinuities"`
	// Spoofed are RTP packets and RTCP reports for one of the drone's
	// SSRCs from another source than the one the SSRC is bound to:
	// dropped. Rebinds are SSRCs taken over by a new source after the
	// old one was silent for rebind_after.
	Spoofed uint64 `json:"spoofed"`
	Rebinds uint64 `json:"rebinds"`
}

func (c *droneCounters) snapshot() DroneStats {
	return DroneStats{
		Packets: c.packets.Load(), Bytes: c.bytes.Load(), QueueDrops: c.queueDrops.Load(),
		Malformed: c.malformed.Load(), MalformedPayload: c.malformedPayload.Load(),
		Lost: c.lost.Load(), Late: c.late.Load(), Duplicates: c.duplicates.Load(),
		Reordered: c.reordered.Load(), SeqJumps: c.seqJumps.Load(),
		FramesOut: c.framesOut.Load(), FramesDropped: c.framesDropped.Load(),
		FramesSkipped: c.framesSkipped.Load(), FramesTooLarge: c.framesTooLarge.Load(),
		KeyframesNoParams: c.keyframesNoParams.Load(),
		Chunks:            c.chunks.Load(), ChunkBytes: c.chunkBytes.Load(), LateChunks: c.lateChunks.Load(),
		AppendErrors: c.appendErrors.Load(), RawPackets: c.rawPackets.Load(),
		RTCP: c.rtcp.Load(), SenderReports: c.senderReports.Load(), MalformedRTCP: c.malformedRTCP.Load(),
		ClockJumps: c.clockJumps.Load(), SSRCChanges: c.ssrcChanges.Load(),
		ClockSkewChunks: c.clockSkewChunks.Load(), SRSkewed: c.srSkewed.Load(),
		Discontinuities: c.discontinuities.Load(),
		Spoofed:         c.spoofed.Load(), Rebinds: c.rebinds.Load(),
	}
}

// add sums o into s.
func (s *DroneStats) add(o DroneStats) {
	s.Packets += o.Packets
	s.Bytes += o.Bytes
	s.QueueDrops += o.QueueDrops
	s.Malformed += o.Malformed
	s.MalformedPayload += o.MalformedPayload
	s.Lost += o.Lost
	s.Late += o.Late
	s.Duplicates += o.Duplicates
	s.Reordered += o.Reordered
	s.SeqJumps += o.SeqJumps
	s.FramesOut += o.FramesOut
	s.FramesDropped += o.FramesDropped
	s.FramesSkipped += o.FramesSkipped
	s.FramesTooLarge += o.FramesTooLarge
	s.KeyframesNoParams += o.KeyframesNoParams
	s.Chunks += o.Chunks
	s.ChunkBytes += o.ChunkBytes
	s.LateChunks += o.LateChunks
	s.AppendErrors += o.AppendErrors
	s.RawPackets += o.RawPackets
	s.RTCP += o.RTCP
	s.SenderReports += o.SenderReports
	s.MalformedRTCP += o.MalformedRTCP
	s.ClockJumps += o.ClockJumps
	s.ClockSkewChunks += o.ClockSkewChunks
	s.SRSkewed += o.SRSkewed
	s.SSRCChanges += o.SSRCChanges
	s.Discontinuities += o.Discontinuities
	s.Spoofed += o.Spoofed
	s.Rebinds += o.Rebinds
}

// receiveCounters are the socket-level counters of an Ingest.
type receiveCounters struct {
	datagrams, bytes atomic.Uint64
	readBatches      atomic.Uint64
	oversize         atomic.Uint64
	notRTP           atomic.Uint64
	rejected         atomic.Uint64
	unverified       atomic.Uint64
	tooManyDrones    atomic.Uint64
	evicted          atomic.Uint64
	unknownRTCP      atomic.Uint64
	dronesStarted    atomic.Uint64
	dronesClosed     atomic.Uint64
}

// Stats is a snapshot of an Ingest's counters.
type Stats struct {
	// Datagrams and Bytes read from the sockets, in ReadBatches recvmmsg calls.
	Datagrams   uint64 `json:"datagrams"`
	Bytes       uint64 `json:"bytes"`
	ReadBatches uint64 `json:"read_batches"`
	// Oversize datagrams exceeded max_packet_size; NotRTP were neither RTP
	// nor RTCP (wrong version, truncated header).
	Oversize uint64 `json:"oversize"`
	NotRTP   uint64 `json:"not_rtp"`
	// Rejected came from sources outside the allowlist; Unverified were
	// from new SSRCs that did not pass probation (or discovery is off);
	// TooManyDrones were refused by max_drones; UnknownRTCP were reports
	// for SSRCs of no drone.
	Rejected      uint64 `json:"rejected"`
	Unverified    uint64 `json:"unverified"`
	TooManyDrones uint64 `json:"too_many_drones"`
	UnknownRTCP   uint64 `json:"unknown_rtcp"`
	// Evicted are discovered drones closed to give their slot to a
	// newcomer, after evict_idle of silence.
	Evicted uint64 `json:"evicted"`
	// KernelDrops are datagrams the kernel dropped on full socket buffers
	// (SO_RXQ_OVFL; 0 where the OS does not report them).
	KernelDrops uint64 `json:"kernel_drops"`
	// DronesStarted and DronesClosed count drone sessions; Drones is the
	// number active.
	DronesStarted uint64 `json:"drones_started"`
	DronesClosed  uint64 `json:"drones_closed"`
	Drones        int    `json:"drones"`
	// SocketBuffer is the receive buffer the kernel granted (bytes).
	SocketBuffer int `json:"socket_buffer"`
	// DroneStats sums the counters of all drones, active and closed.
	DroneStats
	// PerDrone has the counters of each drone seen, by id.
	PerDrone map[string]DroneStats `json:"per_drone"`
	// Sources are the RTSP sources' states, in configuration order.
	Sources []SourceStatus `json:"sources,omitempty"`
}
