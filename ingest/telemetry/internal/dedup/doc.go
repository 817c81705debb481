// Package dedup keeps the MQTT dedup entries of the telemetry ingest: for
// each session (the broker client's, each persistent listener client's)
// the newest stored message of every packet id, so that a message sent
// again with DUP after a crash or a cut is acked, not stored twice. The
// entries are journal records written with the append (Source.Option) and
// read back (ReadJournal); superseded ones are collected (GC).
package dedup
