// Package sync replicates local streams to the central store (NATS
// JetStream) exactly once, resumable from committed stream cuts, and reads
// the central store back (for `edge-agent read`, `export video` and the
// demo's verification).
//
// # Central layout (public contract, see DESIGN.md "The central store")
//
// One JetStream stream per local stream, EDGE_<STREAM> (upper case),
// subjects "edge.<stream>.>", file storage, allow_atomic: true, created by
// the agent when missing.
//
//	edge.<stream>.<agent>.data.<routing-key>   one message per event
//	edge.<stream>.<agent>.cut                  one commit record per transaction
//
// Data message headers:
//
//	Edge-Segment          decimal segment id (epoch<<32 | number)
//	Edge-Offset           decimal offset in the segment
//	Edge-Event-Time       decimal Unix ns (0 = unknown)
//	Edge-Writer           writer id
//	Edge-Txn              decimal transaction number
//	Edge-Late, Edge-Discontinuity, Edge-Keyframe, Edge-Estimated-Time,
//	Edge-Gap, Edge-Raw    "1" where the event has the flag (absent otherwise)
//	Content-Type          the event's content type
//	Edge-Mqtt-Topic       from the local header "mqtt-topic"
//	Edge-Frame-Pts        from the local header "frame-pts" (comma-separated Unix ns)
//	Edge-Ingest-Time      decimal Unix ns the agent received the event
//	Edge-H-<key>          every other local header, key as stored
//
// The payload is the event's bytes and nothing else.
//
// # Subject-token escaping
//
// The agent id and the routing key become subject tokens. Bytes in
// [A-Za-z0-9_-] are kept; every other byte (including '.', '*', '>', '%',
// spaces and every non-ASCII byte of UTF-8) is written as '%' followed by two
// upper-case hex digits. "drone-1" stays "drone-1"; "fleet.a/7" becomes
// "fleet%2Ea%2F7". An empty string is written "%". Unescaping rejects any
// other use of '%'. The routing key is also carried verbatim nowhere else:
// consumers unescape the last token.
//
// # Transaction
//
// A transaction is one atomic batch (ADR-50, via orbit.go jetstreamext):
//
//	data msg 1 ─ data msg 2 ─ … ─ data msg n ─ commit record (Nats-Batch-Commit: 1)
//	                                             Nats-Expected-Last-Subject-Sequence:
//	                                               seq of the previous commit record (0: none)
//
// The commit record is JSON:
//
//	{"agent":"a1","stream":"video","txn":42,"instance":"<random per run>",
//	 "cut":{"0":120,"4294967297":3}, "cut_text":"video:0.0=120,1.1=3",
//	 "watermark":{"lower_ns":…,"upper_ns":…,"cut":{…}},
//	 "events":57,"bytes":81234,"committed_at_ns":…}
//
// "cut" maps decimal segment ids to offsets: every event before it is in
// this or an earlier transaction of the agent, and no event after it is.
//
// # Exactly once
//
// The resume point is the last commit record on the agent's cut subject,
// read through the stream leader ($JS.API.STREAM.MSG.GET, never a direct
// get). The next transaction holds the local events after that cut and
// expects that record's sequence, so the commit records form one chain: a
// retried, duplicated or late batch fails the expectation and leaves
// nothing (atomic), and a commit whose ack was lost is found at the resume,
// not resent. Dedup windows play no part.
//
// Commits are pipelined: the next transaction's data messages are sent
// while the previous commit awaits its ack, and its commit record (which
// must expect the previous record's sequence) only after that ack; when a
// commit fails, the transaction behind it is abandoned.
//
// A failed expectation whose winner is a record of another agent instance
// written after we started (or a second one during our start) means
// another process uses this agent id: the stream stops with ErrFenced.
package sync
