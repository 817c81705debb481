// Package video captures drones' RTP video into GOP-aligned chunks with
// wall-clock event times, appended durably to a local stream.
//
// Data flow (one goroutine per socket, one per drone):
//
//	UDP :5004 RTP (+ RTCP muxed, RFC 5761) ─┐  recvmmsg batches
//	UDP :5005 RTCP ─────────────────────────┤
//	                                        ▼
//	        router: allowlist → SSRC → drone (configured by SSRC / source
//	        address, or discovered after 2 in-sequence packets)
//	                                        │
//	RTSP sources (rtsp.go, one goroutine    │  pulled RTP/RTCP, tagged with
//	each: DESCRIBE/SETUP/PLAY, reconnect ───┤  the connection (a new one is
//	with bounded backoff; gortsplib)        │  a new session, discontinuity)
//	                                        │ bounded queue per drone (drops counted)
//	                                        ▼
//	drone: reorder (ingest/sequence classifies: 16-bit, 512 newest; buffer of max packets / max wait) → depacketize
//	       (H.264 RFC 6184 single/STAP-A/FU-A, H.265 RFC 7798 single/AP/FU)
//	       → frames (same RTP timestamp; marker ends) → PTS (RTCP SR NTP↔RTP)
//	       → chunker (new chunk at each keyframe; cut at max duration/bytes)
//	       → Appender.Append (durable) → Marks.Note(writer, last PTS, pos)
//
// # Chunk event
//
//	RoutingKey  drone id          Writer  "video/<drone>"
//	EventTime   PTS of the first frame (Unix ns)
//	Flags       FlagKeyframe       first frame is a keyframe
//	            FlagDiscontinuity  something is missing before this chunk
//	                               (first chunk of a session, loss, SSRC
//	                               change, sequence jump, clock jump, a
//	                               chunk the store refused)
//	            FlagEstimatedTime  PTS from arrival times (no SR yet)
//	            FlagLate           the watermark had passed EventTime
//	ContentType "video/h264" | "video/h265"
//	Headers     codec        "h264" | "h265"
//	            ssrc         8 hex digits
//	            frame-pts    PTS of each frame, comma-separated Unix ns
//	            frame-sizes  bytes of each frame in Payload, comma-separated
//	            frame-keys   indices of keyframes, comma-separated ("" = none)
//	Payload     Annex-B: each NAL as 00 00 00 01 <nal>; a keyframe is
//	            preceded by the cached VPS/SPS/PPS it lacks
//
// Concatenating one drone's chunk payloads in order gives a playable
// elementary stream: frames after a loss are dropped until the next
// keyframe, so the stream never references a missing frame.
//
// # Raw event (unknown payload types)
//
//	Flags FlagRaw|FlagEstimatedTime, ContentType "application/x-rtp-batch",
//	header "packets" = count, EventTime = first arrival, Payload:
//	( [arrival Unix ns int64 BE][length uint16 BE][RTP packet] )*
//
// # Event time
//
// After an RTCP Sender Report, PTS = NTP(SR) + int32(rtp − rtp(SR)) / 90 kHz
// (32-bit wrap safe). A new SR that moves the mapping by more than
// max_clock_jump for the same RTP timestamp is a discontinuity (counted),
// not a silent shift. Before the first SR, the first frame's arrival time
// anchors the mapping and chunks are flagged estimated.
package video
