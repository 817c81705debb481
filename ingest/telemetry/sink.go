package telemetry

import (
	"context"

	"github.com/edge-agent/edge-agent/localstream"
)

// Appender is what the ingester needs of the telemetry stream; satisfied by
// *localstream.Stream. Appends queued from one goroutine must become durable
// (and call back) in call order.
type Appender interface {
	AppendAsync(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error
}

// MetaScanner reads back the dedup entries at start; satisfied by *localstream.Store.
type MetaScanner interface {
	ScanMeta(prefix string) (map[string][]byte, error)
}

// Marks is what the ingest needs from the watermark tracker of its stream.
type Marks interface {
	// Late reports, before the append, whether to flag the event FlagLate.
	Late(writer string, eventTimeNs int64) bool
	// Note records the event time at its durable position (after the append).
	Note(writer string, eventTimeNs int64, pos localstream.Position) error
	// CloseWriter stops a writer from holding the watermark back (drone offline).
	CloseWriter(writer string) error
}

// Sink is where telemetry goes.
type Sink struct {
	// Stream is the telemetry stream. Required.
	Stream Appender
	// Meta is the store holding the dedup entries. Required.
	Meta MetaScanner
	// Marks receives writer marks; nil disables them.
	Marks Marks
}
