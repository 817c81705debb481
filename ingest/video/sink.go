package video

import (
	"context"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// Sink is where an Ingest's chunks go: the stream, and the watermark
// tracker of the stream notified after each durable chunk (nil: none).
type Sink struct {
	Stream Appender
	Marks  Marks
}

// Appender is where chunks go: *localstream.Stream satisfies it. Append
// must return only once the event is durable.
type Appender interface {
	Append(ctx context.Context, ev localstream.Event, opts ...localstream.AppendOption) (localstream.Position, error)
}

// Marks is what the ingest needs from the watermark tracker of its stream.
type Marks interface {
	// Admit, before the append, gives the flags of an event of writer at
	// eventTimeNs received at ingestNs (late: behind the published
	// watermark; clock skew: outside the receiving clock's bounds) and
	// the bound of its mark (docs/design.md rule 12).
	Admit(writer string, eventTimeNs, ingestNs int64) watermark.Admission
	// NoteAdmitted records, after the durable append at pos, that
	// writer's later events have times ≥ the admitted bound of eventTimeNs.
	NoteAdmitted(writer string, a watermark.Admission, eventTimeNs int64, pos localstream.Position) error
	// CloseWriter stops counting writer (drone gone).
	CloseWriter(writer string) error
}
