// Package centralread reads the central store back for `edge-agent read`,
// `cut`, `export video`, the demo's verification and the unpack service:
// an agent's committed transactions in commit order (both layouts, mixed
// in one chain), queries by drone and time, the time cut across streams,
// and video export from a keyframe. It decodes with package wire and does
// not compile the writer.
package centralread
