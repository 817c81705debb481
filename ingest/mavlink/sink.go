package mavlink

import "github.com/edge-agent/edge-agent/ingest/telemetry"

// Sink is where MAVLink events go: the telemetry stream and its
// watermark tracker, through the same interfaces as MQTT telemetry.
type Sink struct {
	// Stream is the telemetry stream. Required. Appends queued from one
	// goroutine become durable (and call back) in call order.
	Stream telemetry.Appender
	// Marks receives writer marks; nil disables them.
	Marks telemetry.Marks
}
