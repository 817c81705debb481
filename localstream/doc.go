// Package localstream keeps the agent's durable, segmented local streams in
// Badger: append, read from cut to cut, stream cuts, scaling (split and
// merge), committed cuts per sink, retention and explicit shedding.
//
// # Model
//
// A stream is split into segments, each owning a range [low, high) of the
// routing-key hash space [0, 1) (KeyHash: FNV-1a 64 of the key, top 53 bits
// / 2^53 — part of the on-disk contract). A segment id is epoch<<32|number.
// A split seals one segment and creates several covering its range in a new
// epoch; a merge seals adjacent segments and creates one covering their
// union. The segments that ever contained one key form a chain ordered by
// epoch, so a key's events are totally ordered across scales; readers read
// a successor only after all its predecessors are exhausted.
//
// # Writing
//
// Every append of every stream goes through one queue (bounded: back-
// pressure) to one committer goroutine, which assigns offsets in queue
// order and writes batches (bounded by events and bytes) as Badger
// transactions without waiting for them, and a completer acknowledges
// batches in order once durable. Badger syncs its WAL once per
// transaction (DurabilityAlways), so the committer makes few, large ones:
// while other appends are in flight it holds a batch open for the
// appenders it expects (those the last commit left unacknowledged), at
// most the group commit window (Options.GroupCommitWindow) beyond the
// sync in flight; a lone writer is never held (docs/localstream.md). Scales and truncations run in the
// committer between batches, so no event lands in a sealed segment and a
// seal is never durable before the data of the segment it seals. After a
// failed write every later write fails with the same error (sticky); the
// store must be reopened. The store has then failed (Store.Failed, and
// StoreStats.Failed says why), as it has when its directory is removed or
// replaced under it (checked before every commit and every 250 ms:
// ErrDirGone), since Badger would go on acknowledging into files without a
// name. Reads of what is durable go on. Close returns within
// Options.CloseTimeout whatever Badger does (on a failing disk it retries
// its memtable flush forever), and Badger's log lines come at most once
// per 30 s per message. Every file Badger writes through mmap (memtable
// logs, tables, value log, DISCARD) has its blocks allocated before Badger
// writes them, so that a filesystem filled by another process refuses
// commits (ErrDiskFull) and fails Badger's flushes and compactions with an
// error it retries, instead of faulting (mmapspace.go, walspace.go).
//
// # Keys
//
//	d | len(stream) u8 | stream | segment u64 BE | offset u64 BE  → record or record batch
//	s | stream                                                   → stream metadata (JSON)
//	c | len(stream) u8 | stream | sink                           → committed cut (binary StreamCut)
//	x | key                                                      → PutMeta / WithMeta values
//	z                                                            → written and dropped by Reclaim
//
// Among the x keys, "localstream/payload/<stream>/<seq>" is the index of a
// payload file (see Payload files), and a journal entry (WithJournal) is
// x | prefix | sequence u64 BE → the journal bytes of one commit.
//
// One segment's events are one contiguous key range in offset order. A
// data entry holds one record (version 1 or 2) or a record batch (version
// 3, or 4 compressed) of consecutive offsets; its key holds the offset of
// its last record, so seeking the key of offset o finds the entry that
// holds o. Open segments' lengths are not stored: they are recovered from
// the last data key on Open, so an append writes nothing but its record
// (and its WithMeta values, in the same transaction).
//
// # Record, version 1
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  version = 1  |             flags (u16 BE)    |  event time   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+               +
//	|            (i64 BE, Unix ns, 0 = unknown)                     |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |   ingest time (i64 BE, ns)    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                                                               |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               | uvarint len | routing key ... |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| uvarint len | writer ...  | uvarint len | content type ...    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| uvarint n | n × (uvarint len, key, uvarint len, value)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| uvarint len | payload ...                                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Flags: 1 keyframe, 2 discontinuity, 4 late, 8 estimated time, 16 gap
// marker, 32 raw. A record must be consumed exactly; Badger checksums the
// bytes, and its transactions make a record present whole or not at all.
//
// # Record, version 2: the payload in a payload file
//
// Payloads of 4 KiB and more go to a payload file; the record is version
// 1's with version = 2 and, instead of the payload field, a reference:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| ... as version 1, up to and including the headers ...         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| uvarint file seq | uvarint offset | uvarint length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 CRC-32C of the payload (u32 BE)               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// # Record batch, version 3
//
// The records one commit appends to one segment are one Badger entry
// (several of at most 256 KiB when they are more), so that Badger's
// per-entry work (WAL entry, memtable insert, LSM key) is paid once per
// commit and segment instead of once per event; a lone record is stored
// as itself:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  version = 3  | uvarint n ≥ 2 | n × (uvarint len, record v1/v2) |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The records hold offsets last-n+1 … last, last being the key's offset.
// Stores written before batches (one record per entry) read as they are.
// Truncate and Shed delete the entries whose last offset is below the cut;
// an entry that reaches past the cut stays, and readers skip its records
// below the segment's start (Segment.Start, persisted with the head). So
// a segment keeps at most one batch's bytes below its head until the
// next deletion passes it.
//
// # Compressed record batch, version 4
//
// A batch that S2 (github.com/klauspost/compress/s2, block format) makes
// at least an eighth smaller is stored compressed:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  version = 4  | S2 block of a version 3 batch (uvarint length…) |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// One drone's records repeat their routing key, writer, content type and
// headers, and JSON payloads repeat their field names: a batch of 200-byte
// random payloads is ~0.73 of its size, so fewer bytes pass through
// Badger's WAL, memtable, table builder and tables. The decoded length
// (the block's header) must be at most 257 KiB and decode to a version 3
// batch; anything else is ErrCorruptRecord. Stores written before read as
// they are; an agent older than version 4 cannot read a store written
// since.
//
// # Payload files
//
// <dir>/payloads/<stream>.<seq, 10 digits> holds one segment's large
// payloads back to back in offset order. A file is deleted once its
// segment's head passes the last event it holds (payload.go has the
// rules: index, durability, crash recovery). So shedding and truncation
// give bytes back to the filesystem at once and rewrite nothing; Reclaim
// (space.go) gives back what Badger holds (small events, tombstones).
//
// # Retention
//
// Truncate deletes before a cut only when every sink has committed past
// it. Shed deletes by policy whatever it is told and appends one gap
// marker per routing key that lost events (FlagGap, JSON Gap payload), so
// the loss is replicated and visible at the centre. Both delete the
// payload files that died; Reclaim then frees Badger's share.
//
// # Free space
//
// Below Options.MinFreeBytes (measured every 250 ms) appends fail with
// ErrDiskFull and nothing is written; gap markers (Shed's, and carried
// ones appended with BelowFloor) pass. BelowFloor reports the state; the
// store logs an error when it starts (at most every 30 s while it lasts)
// and an info line when it ends.
package localstream
