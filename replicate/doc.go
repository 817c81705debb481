// Package replicate replicates local streams to the central store (NATS
// JetStream) exactly once, resumable from committed stream cuts: the
// replicator of one stream and its resume decisions (chain, resume), the
// JetStream sink of both central layouts with its fencing and limits, the
// connection and its link, the uplink's byte budget shared by all streams
// of an agent, and the station identity. What it writes is the format of
// package wire; it never reads through package centralread.
package replicate
