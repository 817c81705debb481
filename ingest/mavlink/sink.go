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
}
