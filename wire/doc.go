// Package wire is the central format: what the replicator (package
// replicate) writes to the central store and every reader (package
// centralread, the unpack service, tools of other teams) reads back —
// commit records, layout-2 packs, layout-1 data messages and their
// headers, subjects and token escaping, markers. It imports neither side.
//
// The specification is docs/central-format.md, complete enough to write a
// reader from it alone (internal/specreader is one); the golden vectors
// of testdata/central-format pin it (TestGoldenVectors, -update). In
// short:
//
//	EDGE_<STREAM>, subjects edge.<stream>.>
//	  edge.<stream>.<agent>.cut          layout 2: a pack (0xE2 …) per
//	                                     transaction; layout 1: a JSON
//	                                     commit record ('{' …)
//	  edge.<stream>.<agent>.part         layout 2: the events of a split
//	                                     transaction, before its .cut
//	  edge.<stream>.<agent>.data.<key>   layout 1: one event, Edge-* headers
//
//	pack (version 2):
//	+------+------+---------------------------------------+---------------------+
//	| 0xE2 | 0x01 | skippable zstd frame 0x184D2A5E:      | zstd frame: body,   |
//	|      |      | version 2, CRC-32C of what follows    | compressed/stored   |
//	+------+------+---------------------------------------+---------------------+
//	body: kind (1 commit, 2 part, 3 commit with chain fields), commit
//	record | part's txn, string table, event metadata (deltas), payloads
//
// Version-1 packs (codec 0: the body as is; codec 1: a zstd frame, no
// envelope) still read; version-1 readers read version-2 packs, as zstd
// skips the envelope.
package wire
