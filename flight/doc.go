// Package flight turns what the centre holds into flight records: it finds
// a drone's flights (MAVLink arm/disarm, a status field or a silence rule
// for MQTT drones, or a user's time range), writes one flight as an MCAP
// file (video, MAVLink, positions, MQTT telemetry, host health and gap
// markers on one timeline, readable by Foxglove and any MCAP reader) with a
// signed certificate that proves it complete, and verifies such a file.
//
// It reads the central store with package centralread, splits video
// chunks with the video package's own chunk decoder and decodes MAVLink
// with gomavlib.
//
// # What a record holds
//
//	flight.mcap                       flight.mcap.cert.json
//	+---------------------------+     +----------------------------+
//	| /video/<drone> (protobuf) |     | certificate (as attached)  |
//	| /mavlink/<drone> (raw)    |     | mcap_sha256                |
//	| /position/<drone>         |     | file_signature (Ed25519)   |
//	| /telemetry/<drone> (JSON) |     +----------------------------+
//	| /health/<agent>           |
//	| /flight/gaps              |
//	| /flight/events (index)    |
//	| metadata "flight"         |
//	| attachment certificate    |
//	+---------------------------+
//
// Every event read from the centre has one entry on /flight/events (its
// stream, agent, central sequence, position, times, flags and the SHA-256
// of its payload) and one or more data messages (a video chunk becomes one
// message per access unit); all of them carry the event's number in the
// MCAP message's sequence field, so a reader regroups them. The
// certificate's hash chain runs over the entries in (stream, sequence)
// order: leaf = SHA-256 of the entry's canonical bytes, head_i =
// SHA-256(head_{i-1} ‖ leaf_i). The certificate is signed with the
// centre's Ed25519 key; the sidecar adds the file's SHA-256 (which the file
// cannot hold about itself) and a signature over it. docs/flight.md has
// the formats, the completeness rule and the key's life.
package flight
