// Package watermark turns the times writers note into watermarks: triples
// (lower, upper, cut) saying "every event after cut that is not flagged
// late has an event time of at least lower". It keeps rules 5–7 of docs/design.md:
// a committed watermark uses only marks inside the committed cut, and
// watermarks never move back in time or in cut.
//
// # Marks
//
// An ingest calls, per event of writer W with time t:
//
//	a := Admit(W, t, i)          before the append: flags (late, clock skew);
//	                             i is the ingest time (the receiving clock)
//	Append(...)                  durable (localstream)
//	NoteAdmitted(W, a, t, pos)   after the append: W's mark "time a.Mark(t) at pos"
//
// The receiving clock bounds every mark (clockbound.go): an event in
// bounds marks at most its ingest time; one more than MaxClockSkew ahead
// is flagged clock-skew and marks ingest − skew; one more than
// MaxClockBehind behind is flagged clock-skew and late, and its writer
// stops holding the watermark back. So no watermark is ahead of the
// receiving clock, and one drone's bad clock cannot make others late.
// Late and Note are the same without a receiving clock.
//
// A mark promises that W's later events are at or after t. With an allowed
// lateness L the noted time is max(times seen) − L. A mark whose time goes
// below W's noted time (ErrTimeBackwards) or whose position does not
// advance (ErrPositionNotAdvancing) is refused and counted; Late already
// answered true for such an event. Late is true when t is before the
// published local or committed lower bound, or before W's own noted time.
//
// # Aggregation
//
//	writers      a: ──m──m──m──m──m──►   (time, position) marks
//	             b: ────m─────────m──►
//	             c: ──m──m──× closed / idle
//
//	local      lower = min over active writers of their latest noted time
//	           upper = max time of the marks in the cut
//	           cut   = Covering(open segments at 0, latest positions of all writers)
//
//	committed  per writer: base = its newest mark inside the committed cut
//	           lower = min over counted writers of base time (or, with no
//	                   base yet, its floor: the lower of its first mark's
//	                   time and its first event's / its event in flight)
//	           cut   = Covering(committed cut, base positions) ≤ committed cut
//	           (a cut before the last result's rewinds to the newest of the
//	           last 32 results at or before it: a failed, rebuilt transaction)
//
// A writer counts while active: it noted or asked Admit within IdleTimeout,
// is not closed and not behind the receiving clock, or has an event in
// flight (Admit asked, Note not yet; for up to 10 idle timeouts). With no
// writer counting and none open (every one closed or behind), lower
// follows the receiving clock (now − MaxClockSkew). In the committed view a writer that is idle, behind or
// closed still counts until every event it wrote that is not late is
// inside the committed cut; when none counts and one is open (idle),
// lower is the oldest of the writers' newest marks inside the cut. A new
// watermark is emitted only when lower advances; its cut is joined with the
// previous one, so both only move forward.
//
// Restart: marks written lazily may be lost with a crash, so the events
// up to the tail at load time are of unknown writers and times. The next
// local watermark's cut is joined with that tail; no committed watermark
// is emitted before the committed cut reaches it, and committed cuts are
// joined with it while a rewind could still go before it.
//
// Every cut operation goes through localstream.Topology (Covering, Join,
// LessEq, Contains), so marks on sealed segments and on their successors
// combine across splits and merges. A writer keeps one position per segment
// it wrote to; positions in predecessors of a newer one are pruned.
//
// The core (core.go) is deterministic: marks, time (Unix ns) and topology
// snapshots are arguments; the data-driven tests in testdata/ and the
// property test drive it directly. The Tracker wraps it with a lock and
// persistence.
//
// # Persisted records
//
// Under meta key "wm/<stream>/<writer>" (writer ids may contain '/'; stream
// names cannot), version 1, varints as in encoding/binary:
//
//	+-----+-----+-------+--------+---------+------------+--------+-----------+----------------+--------+
//	| 'W' | ver | flags | noted  | maxSeen | lastActive | floor  | positions | [base: time,   | crc32  |
//	| u8  | =1  | u8    | varint | varint  | varint     | varint |           |  positions]    | IEEE,  |
//	|     |     |       | ns     | ns      | Unix ns    | ns     |           | if flags bit 2 | BE u32 |
//	+-----+-----+-------+--------+---------+------------+--------+-----------+----------------+--------+
//	flags: bit 0 closed, bit 1 has a mark, bit 2 has a base; other bits must be 0
//	positions: uvarint n (≤ 4096), then n × (uvarint segment id, uvarint offset)
//
// Under "wmpub/<stream>/local" the last local watermark returned, under
// "wmpub/<stream>/committed" the last committed ones (up to 32, oldest
// first, so that a failed transaction can be rebuilt with a smaller cut),
// version 1:
//
//	+-----+-----+-------+-----------+------------------------------------------+--------+
//	| 'M' | ver | flags | uvarint n | n × (varint lower, varint upper,         | crc32  |
//	| u8  | =1  | u8    | 1..64     |      uvarint len, len bytes: the cut in  | BE u32 |
//	|     |     |       |           |      localstream's binary cut form)      |        |
//	+-----+-----+-------+-----------+------------------------------------------+--------+
//	flags: bit 0 "older results were dropped" (no rewind before the first);
//	other bits must be 0
//
// The checksum covers every byte before it. Both decoders are fuzzed.
package watermark
