package mavlink

import "github.com/edge-agent/edge-agent/ingest/telemetry"

// Sink is where MAVLink events go: the telemetry stream and its
// watermark tracker (the same Marks as MQTT telemetry's).
type Sink struct {
	// Stream is the telemetry stream. Required. Groups appended from one
	// goroutine become durable (and call back) in call order.
	Stream Appender
	// Marks receives writer marks; nil disables them.
	Marks telemetry.Marks
	// Meta reads back what the intake keeps in the store beside the
	// events (the signing streams' last timestamps, written with the
	// groups): the telemetry stream's *localstream.Store. nil: nothing is
	// read back at start, and the timestamps of the last run are not
	// known (a new stream is still refused a minute behind the clock).
	Meta MetaReader
}

// MetaReader reads metadata values by key prefix: *localstream.Store.
type MetaReader interface {
	ScanMeta(prefix string) (map[string][]byte, error)
}
