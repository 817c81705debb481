package telemetry

import (
	"context"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
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
	// Admit, before the append, gives the event's flags (late, clock
	// skew) and the bound of its mark (docs/design.md rule 12).
	Admit(writer string, eventTimeNs, ingestNs int64) watermark.Admission
	// NoteAdmitted records the event's bounded time at its durable
	// position (after the append).
	NoteAdmitted(writer string, a watermark.Admission, eventTimeNs int64, pos localstream.Position) error
	// CloseWriter stops a writer from holding the watermark back (drone offline).
	CloseWriter(writer string) error
}

// Sink is where telemetry goes.
type Sink struct {
	// Stream is the telemetry stream. Required.
	Stream Appender
	// Meta is the store holding the dedup entries. Required; with a
	// broker it also deletes keys (DeleteMetaKeys: superseded dedup entries
	// are collected), with Listen it is a SessionMeta.
	Meta MetaScanner
	// Marks receives writer marks; nil disables them.
	Marks Marks
}

// SessionMeta is what the listener needs of the store for its clients'
// dedup entries; satisfied by *localstream.Store.
type SessionMeta interface {
	MetaScanner
	// GetMeta reads one key.
	GetMeta(key string) ([]byte, bool, error)
	// DeleteMetaPrefix deletes every key starting with prefix.
	DeleteMetaPrefix(prefix string) (int, error)
	// DeleteMetaKeys deletes keys in few transactions.
	DeleteMetaKeys(keys []string) (int, error)
}
