// Package live sends a preview of every drone's latest state to the centre
// ahead of the replication backlog: the live lane (docs/live.md).
//
// The backlog (package sync) is exactly once and oldest first, so after an
// outage "where is drone 3 now?" waits for the whole backlog to cross the
// uplink. The live lane follows each configured local stream's tail and
// keeps the latest event of every drone (for video: its latest keyframe);
// whenever the centre is reachable it sends each drone's latest value at
// most once per interval, first on the uplink (a priority above every
// stream's) and inside its own share of the uplink cap. It is a preview:
// its own JetStream stream and subjects, one message kept per subject and a
// per-message TTL, never in a commit chain, never fencing, never counted as
// replicated. A value is published with an acknowledgement, into EDGELIVE
// only, and counts as sent once acknowledged; the stream is checked on each
// connection, after every reconnect and after a failed publish, and nothing
// is sent until a check succeeds. A value is covered — also in the backlog at the centre — once
// the committed watermark of its stream has passed its event time.
//
// # Central layout
//
//	stream   EDGELIVE (file storage, max_msgs_per_subject 1, allow_msg_ttl;
//	         a name no local stream maps to: those are EDGE_<STREAM>)
//	subject  edgelive.<agent>.<stream>.<drone>
//	         (tokens escaped as wire.EscapeToken / wire.KeyToken)
//	payload  the event's bytes (video: the keyframe's Annex-B access unit,
//	         parameter sets included: it decodes alone as a still picture)
//	headers  Edge-Segment, Edge-Offset    local position of the event
//	         Edge-Event-Time               Unix ns (video: the keyframe's PTS)
//	         Edge-Ingest-Time              Unix ns
//	         Edge-Sent-Time                Unix ns, when the lane sent it
//	         Edge-Writer, Content-Type     as the event's
//	         Edge-Routing-Key              the drone id (encoded as
//	                                       wire.EncodeHeaderValue)
//	         Edge-Keyframe: 1              a video keyframe
//	         Nats-TTL                      the configured TTL (Config.TTL)
//	         Nats-Expected-Stream          EDGELIVE
//
// Nothing of the backlog's layout (EDGE_<STREAM>, commit records) changes
// with the lane on or off.
package live
