package video

import (
	"context"

	"github.com/edge-agent/edge-agent/localstream"
)

// Appender is where chunks go: *localstream.Stream satisfies it. Append
// must return only once the event is durable.
type Appender interface {
	Append(ctx context.Context, ev localstream.Event, opts ...localstream.AppendOption) (localstream.Position, error)
}

// Marks is what the ingest needs from the watermark tracker of its stream.
type Marks interface {
	// Late reports, before the append, whether an event of writer at
	// eventTimeNs is behind the published watermark (flag it FlagLate).
	Late(writer string, eventTimeNs int64) bool
	// Note records, after the durable append at pos, that writer's later
	// events have times ≥ eventTimeNs.
	Note(writer string, eventTimeNs int64, pos localstream.Position) error
	// CloseWriter stops counting writer (drone gone).
	CloseWriter(writer string) error
}
