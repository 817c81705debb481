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
	discontinuities     atomic.Uint64
}

// DroneStats is a snapshot of one drone's counters.
type DroneStats struct {
	// Packets and Bytes are RTP datagrams routed to the drone.
	Packets, Bytes uint64
	// QueueDrops are packets dropped because the drone's queue was full.
	QueueDrops uint64
	// Malformed are RTP packets pion could not parse.
	Malformed uint64
	// MalformedPayload are payloads the depacketizer rejected (frame dropped).
	MalformedPayload uint64
	// Lost are sequence numbers declared lost; Late arrived after their gap
	// was given up; Duplicates were already delivered or buffered;
	// Reordered waited in the reorder buffer; SeqJumps are restarts of the
	// sequence numbering.
	Lost, Late, Duplicates, Reordered, SeqJumps uint64
	// FramesOut are frames appended in chunks; FramesDropped were incomplete
	// or corrupt; FramesSkipped were whole but followed a loss before the
	// next keyframe; FramesTooLarge exceeded chunk_max_bytes.
	FramesOut, FramesDropped, FramesSkipped, FramesTooLarge uint64
	// KeyframesNoParams are keyframes stored without SPS/PPS(/VPS) (none known yet).
	KeyframesNoParams uint64
	// Chunks and ChunkBytes were appended durably; LateChunks were flagged late.
	Chunks, ChunkBytes, LateChunks uint64
	// AppendErrors are chunks the store refused (lost, next chunk flagged).
	AppendErrors uint64
	// RawPackets are packets of unknown payload types stored raw.
	RawPackets uint64
	// RTCP packets, SenderReports among them, MalformedRTCP rejected.
	RTCP, SenderReports, MalformedRTCP uint64
	// ClockJumps are RTP→wall-clock mapping jumps beyond max_clock_jump.
	ClockJumps uint64
	// ClockSkewChunks are chunks whose time is outside the receiving
	// clock's bounds (flagged clock-skew). SRSkewed are sender reports
	// whose NTP time was outside them while the mapping in use was
	// within: ignored (the mapping in use continues).
	ClockSkewChunks, SRSkewed uint64
	// SSRCChanges are new SSRCs taking over the drone.
	SSRCChanges uint64
	// Discontinuities are chunks flagged FlagDiscontinuity.
	Discontinuities uint64
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
	kernelDrops      atomic.Uint64
	dronesStarted    atomic.Uint64
	dronesClosed     atomic.Uint64
}

// Stats is a snapshot of an Ingest's counters.
type Stats struct {
	// Datagrams and Bytes read from the sockets, in ReadBatches recvmmsg calls.
	Datagrams, Bytes, ReadBatches uint64
	// Oversize datagrams exceeded max_packet_size; NotRTP were neither RTP
	// nor RTCP (wrong version, truncated header).
	Oversize, NotRTP uint64
	// Rejected came from sources outside the allowlist; Unverified were
	// from new SSRCs that did not pass probation (or discovery is off);
	// TooManyDrones were refused by max_drones; UnknownRTCP were reports
	// for SSRCs of no drone.
	Rejected, Unverified, TooManyDrones, UnknownRTCP uint64
	// Evicted are discovered drones closed to give their slot to a
	// newcomer, after evict_idle of silence.
	Evicted uint64
	// KernelDrops are datagrams the kernel dropped on full socket buffers
	// (SO_RXQ_OVFL; 0 where the OS does not report them).
	KernelDrops uint64
	// DronesStarted and DronesClosed count drone sessions; Drones is the
	// number active.
	DronesStarted, DronesClosed uint64
	Drones                      int
	// SocketBuffer is the receive buffer the kernel granted (bytes).
	SocketBuffer int
	// DroneStats sums the counters of all drones, active and closed.
	DroneStats
	// PerDrone has the counters of each drone seen, by id.
	PerDrone map[string]DroneStats
}
