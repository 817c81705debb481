// Package unpack turns the packed central streams into one message per
// event, at the centre, for every tool that maps one message to one
// record (NATS connectors, Flink, Redpanda Connect, RisingWave, the nats
// CLI, last-value-per-subject, per-drone filters and limits).
//
// It reads a layout-2 central stream (EDGE_<STREAM>, see package sync and
// docs/sync.md) in stream order — the order in which the agents' commits
// landed — and republishes each committed transaction's events, exactly
// once and in that order, into a derived stream of its own:
//
//	source   EDGE_<STREAM>     edge.<stream>.<agent>.cut    one pack per transaction
//	                           edge.<stream>.<agent>.part   (a split transaction's events)
//	derived  EDGEEV_<STREAM>   edgeev.<stream>.<agent>.<key>  one message per event
//
// <agent> and <key> are the tokens of the agent id and the event's routing
// key (the drone), escaped as in the source (wire.EscapeToken,
// wire.KeyToken). The derived names have a root of their own (edgeev, not
// edge.ev) because a local stream may be called "ev": EDGE_EV would then
// claim edge.ev.>. One derived stream per source stream, so that video and
// telemetry keep their own retention and each stream's cursor fences only
// that stream.
//
// A derived message is the layout-1 data message of the event (the same
// headers: Edge-Segment, Edge-Offset, Edge-Event-Time, Edge-Ingest-Time,
// Edge-Writer, Edge-Txn, the flag headers, Content-Type, Edge-Mqtt-Topic,
// Edge-Frame-Pts, Edge-Headers, Edge-Routing-Key, Edge-Dropped on a marker;
// the payload is the event's bytes), and in addition:
//
//	Edge-Watermark-Lower   the committed watermark of the event's
//	Edge-Watermark-Upper   transaction, decimal Unix ns
//	Edge-Source-Seq        the sequence in EDGE_<STREAM> of the message that
//	                       holds the event
//	Edge-Source-Index      the event's index in that message (from 0)
//
// An event that would not fit the server's max payload with its headers
// (a near-limit event with long local headers) is republished as a marker
// (Edge-Dropped says why) and counted, so that the derived stream never
// stalls behind it.
//
// # Exactly once: the derived stream is its own cursor
//
// The derived stream is a pure function of the source stream: message k
// of EDGEEV_<STREAM> is the k-th committed event of EDGE_<STREAM>. The
// last derived message names, in Edge-Source-Seq and Edge-Source-Index,
// the last event republished. Every publish carries
// Nats-Expected-Last-Sequence = the derived sequence its predecessor has,
// so the server stores it only directly behind that predecessor:
//
//   - a resume reads the derived stream's last message from the stream
//     leader ($JS.API.STREAM.MSG.GET) and continues with the event after
//     it; a SIGKILL between publishes loses nothing (the landed prefix is
//     the cursor) and repeats nothing (what landed is skipped);
//   - a publish whose ack was lost, or that lands late (a leader change),
//     fails the next publish's expectation instead of being repeated; the
//     unpacker then reads the cursor again;
//   - publishes are pipelined (Options.MaxPending in flight): plain
//     publishes, each with its own expectation, of which one in every few
//     hundred (and the last before the source goes idle) asks for the
//     server's ack, which covers every message before it; when one fails,
//     every one behind it fails its expectation, so the stream never
//     holds a gap, and the next ack reports the failure;
//   - a second instance (an active/standby pair, or `edge-agent central
//     --unpack` on each node of a cluster) writes the same message for the
//     same position; whichever lands, the other's expectation fails, and the
//     one that failed waits as a standby until the derived stream stops
//     moving (Options.StandbyCheck), then takes over.
//
// Neither the duplicate window nor Nats-Msg-Id plays a part. The derived
// stream must be written by the unpacker only, and must keep its last
// message (no max age or message limits that can empty it; limits that
// keep the newest messages are fine): when the last message is gone but
// the stream's last sequence is not 0, the cursor is lost and the
// unpacker stops with ErrCursorLost instead of guessing.
//
// # Layout 1
//
// A layout-1 stream already holds one message per event on per-drone
// subjects. The unpacker reads only the cut and part subjects; layout-1
// commit records carry no events, so nothing is republished for them and
// no derived stream is created until the first pack with events is read.
//
// The unpacker runs at the centre: it reads and writes the central
// cluster only, never the agents' uplink.
package unpack
