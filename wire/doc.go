// Package wire is the central format: what the replicator (package
// replicate) writes to the central store and every reader (package
// centralread, the unpack service, tools of other teams) reads back —
// commit records, layout-2 packs, layout-1 data messages and their
// headers, subjects and token escaping, markers. It imports neither side.
//
// # Central layout (public contract; docs/sync.md describes it in full)
//
// One JetStream stream per local stream, EDGE_<STREAM> (upper case),
// subjects "edge.<stream>.>", file storage, allow_atomic: true, created by
// the agent when missing. Two layouts share it; the agent writes the one
// configured (JetStreamOptions.Layout; `central.layout` in the YAML, whose
// default is 2 with the embedded central and 1 with a central URL, so that
// upgraded agents do not change what existing raw consumers of a cluster
// read); the reader reads both, also mixed in one agent's history
// (an upgraded agent continues its commit chain on the same cut subject).
//
// # Layout 2: one message per transaction
//
//	edge.<stream>.<agent>.cut    one message per transaction: its events
//	                             packed, then its commit record
//	edge.<stream>.<agent>.part   only when one event is too large to share
//	                             a message with the commit record: the
//	                             events, in an atomic batch before the .cut
//
// The message has no headers of its own (Nats-Expected-Last-Subject-Sequence
// is the fencing expectation, see below). Its payload is a pack:
//
//	+------+-------+---------------------------------------------+
//	| 0xE2 | codec | body (codec 0: as is; 1: one zstd frame)    |
//	+------+-------+---------------------------------------------+
//
//	body:   uvarint kind   1 = ends a transaction: commit record follows
//	                       2 = a part: uvarint txn follows
//	                       3 = as 1, the commit record with chain fields
//	        [commit record | uvarint txn]
//	        uvarint nstrings, nstrings × (uvarint len, bytes)   string table
//	        uvarint nevents, nevents × event metadata
//	        the events' payloads, concatenated in event order
//
//	commit record:  uvarint txn, string instance, varint committed_at_ns,
//	                uvarint events, uvarint bytes (of the whole transaction),
//	                cut, varint watermark lower_ns, varint upper_ns, cut
//	                [kind 3: string store (with the station, "store/station":
//	                 both hex, see Lost state below), uvarint epoch_base, u8 lost (0/1),
//	                 lost = 1: string reason, string store, cut from,
//	                 cut to (n = 0: unknown), uvarint central_seq,
//	                 varint found_at_ns]
//	cut:            uvarint n, n × (uvarint segment id, uvarint offset),
//	                ascending segment ids
//	string:         uvarint len, bytes
//
//	event metadata (deltas are to the previous event of the pack, the
//	first to zero; varint = zigzag):
//	        uvarint flags          localstream.Flags bits (keyframe 1,
//	                               discontinuity 2, late 4, estimated time 8,
//	                               gap 16, raw 32)
//	        uvarint routing key, writer, content type   string table indexes
//	        varint  segment id − previous segment id
//	        varint  offset − previous offset − 1
//	        varint  event time − previous event time (Unix ns)
//	        varint  ingest time − previous ingest time (Unix ns)
//	        uvarint nheaders, nheaders × (uvarint key, uvarint value)  indexes
//	        uvarint payload length
//
// The writer compresses the body with zstd when that saves at least a
// sixteenth of it (JSON telemetry: to a fraction; random bytes: never).
// A decoder accepts bodies up to 64 MiB and checks every count and index
// against the bytes left. The events of a message are the transaction's,
// in replication order (per drone in order); consumers that need one
// drone's payloads read the agent's messages and keep that routing key.
// A transaction holds at most what fits one message below the server's
// max payload (8 KiB are kept for the commit record and headers).
//
// A layout-2 transaction is one plain JetStream publish: the server's
// limits on atomic batches in flight (50 per stream, 1,000 per server by
// default) and its 10 s batch timeout do not apply, so the number of
// agents per stream is bound by the stream leader's message rate, not by
// batches (see docs/sync.md, sizing). The rare split transaction is a
// two-message atomic batch whose first message is acked, so that the
// server's refusal (too many batches in flight) is read and retried
// after a jittered backoff.
//
// # Layout 1: one message per event
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
//	Edge-Gap, Edge-Raw,
//	Edge-Clock-Skew       "1" where the event has the flag (absent otherwise)
//	Content-Type          the event's content type
//	Edge-Mqtt-Topic       from the local header "mqtt-topic"
//	Edge-Frame-Pts        from the local header "frame-pts" (comma-separated Unix ns)
//	Edge-Ingest-Time      decimal Unix ns the agent received the event
//	Edge-Headers          every other local header, URL-query encoded, in order
//	Edge-Routing-Key      the routing key, when its subject token is hashed
//	Edge-Dropped          on a marker: why the event could not be sent
//	Edge-Truncated        "1" on a marker whose key and writer were cut to 1 KiB
//
// The payload is the event's bytes and nothing else. The commit record is
// JSON (below); a layout-1 transaction is an atomic batch of its data
// messages and the commit record.
//
// # Header values (layout 1)
//
// nats.go trims a header value's surrounding white space and turns CR and
// LF into spaces. Writer, Content-Type, Edge-Mqtt-Topic, Edge-Frame-Pts,
// Edge-Routing-Key and Edge-Dropped values travel byte-exact: a value with
// a byte below 0x20 or 0x7F, a leading or trailing space, or a leading '%'
// is sent as '%' followed by the value with every byte <= 0x20, '%' and 0x7F
// written %XX (upper-case hex); every other value is sent as it is.
//
//	"telemetry/d1"   → telemetry/d1
//	"telemetry/d1 "  → %telemetry/d1%20
//	"a\r\nb"         → %a%0D%0Ab
//	"%41"            → %%2541
//
// Decoding is strict (each value has one form).
//
// # Markers
//
// An event that cannot be sent (over the server's max payload) is replaced
// in its transaction by a marker that names its position and the reason;
// the commit's cut covers it like any event, and readers return it as a
// CentralEvent with Dropped set (Record: position, routing key, writer,
// times, flags; no headers, no payload). Layout 1: a data message on the
// event's subject with its Edge-Segment, Edge-Offset, Edge-Writer,
// Edge-Event-Time, Edge-Ingest-Time, Edge-Txn and flag headers,
// Edge-Dropped: <reason>, and no payload. Layout 2: an event of the pack
// whose flags have bit 1<<15 (no localstream flag) set, whose one header is
// "dropped" = <reason>, and whose payload is empty. A key or writer too
// long for even a marker is cut to 1 KiB (layout 1: Edge-Truncated: 1;
// layout 2: said in the reason).
//
// # Subject-token escaping
//
// The agent id and the routing key become subject tokens. Bytes in
// [A-Za-z0-9_-] are kept; every other byte (including '.', '*', '>', '%',
// spaces and every non-ASCII byte of UTF-8) is written as '%' followed by two
// upper-case hex digits. "drone-1" stays "drone-1"; "fleet.a/7" becomes
// "fleet%2Ea%2F7". An empty string is written "%". Unescaping rejects any
// other use of '%'. Consumers unescape the last token to get the routing key.
//
// A routing key whose escaped token is longer than MaxTokenBytes (128) gets
// a hashed token instead, so that subjects stay far below the server's
// control line (4,096 bytes by default) whatever a drone calls itself:
//
//	<escaped prefix, cut between escapes> %% <32 hex digits of SHA-256(key)>
//
// EscapeToken never writes "%%", so a hashed token is told by it. The key
// itself travels in the Edge-Routing-Key header; readers take it from there
// and check that it hashes to the token. Agent ids are at most 64 plain bytes.
//
// # Transaction (layout 1)
//
// A layout-1 transaction is one atomic batch (ADR-50, via orbit.go
// jetstreamext), within the centre's limits (Limits: the max payload from the server's
// INFO, the batch limits configured and lowered by the server's
// rejections):
//
//	data msg 1 ─ data msg 2 ─ … ─ data msg n ─ commit record (Nats-Batch-Commit: 1)
//	                                             Nats-Expected-Last-Subject-Sequence:
//	                                               seq of the previous commit record (0: none)
//
// The layout-1 commit record is JSON (layout 2 carries the same fields in
// binary; the reader returns both as a CommitRecord):
//
//	{"agent":"a1","stream":"video","txn":42,"instance":"<random per run>",
//	 "store":"<store identity>", "epoch_base":3,
//	 "cut":{"0":120,"4294967297":3}, "cut_text":"video:0.0=120,1.1=3",
//	 "watermark":{"lower_ns":…,"upper_ns":…,"cut":{…}},
//	 "events":57,"bytes":81234,"committed_at_ns":…,
//	 "lost":{"reason":"local-tail-lost","store":"…","from":{…},"to":{…},
//	         "central_seq":…,"found_at_ns":…}}
//
// "cut" maps decimal segment ids to offsets: every event before it is in
// this or an earlier transaction of the agent, and no event after it is.
// "store" names the local store the events come from (absent in records
// written before store identities); "epoch_base" (absent: 0) is added to
// the epoch of every segment id of the transaction (central segment id =
// local + epoch_base<<32); "lost", when present, is a gap marker: the
// central positions from "from" to "to" (absent: unknown end) will never
// arrive. See resume.go and docs/sync.md, "Lost state".
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
// Commits are pipelined: the next transaction's events are read (and, in
// layout 1, sent) while the previous commit awaits its ack, and its commit
// (which must expect the previous record's sequence) goes out only after
// that ack; when a commit fails, the transaction behind it is abandoned.
//
// One chain per store identity at a time (resume.go): the decision after
// every central read is Decide, a deterministic function of the local
// store's state and the chain's last record; never of how long the last
// writer was silent. A record of another station's store, or of a copy
// of this store elsewhere, means another station uses this agent id: the
// stream stops with ErrTwin, naming both identities, until an operator
// takes over; another store committing while this one runs means this
// one was taken over (ErrFenced). A store that lost data, was restored
// from a backup, or takes over its station's replaced disk continues
// under a new epoch base and reports the loss in the next commit record.
package wire
