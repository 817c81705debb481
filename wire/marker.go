package wire

import (
	"github.com/edge-agent/edge-agent/localstream"
)

// packEventDropped marks a marker in a layout-2 pack: an event-metadata
// flags bit that is no localstream flag. The marker's one header is
// packDroppedKey = the reason; it has no payload.
const (
	packEventDropped localstream.Flags = 1 << 15
	packDroppedKey                     = "dropped"
)

// packMarker is the record a layout-2 pack holds in place of rec. truncate
// cuts its writer and routing key to markerKeep bytes (for a key or writer
// too long for even a marker).
func PackMarker(rec localstream.Record, reason string, truncate bool) localstream.Record {
	m := localstream.Record{Position: rec.Position, Event: localstream.Event{
		RoutingKey: rec.RoutingKey, Writer: rec.Writer, EventTime: rec.EventTime, IngestTime: rec.IngestTime,
		Flags: rec.Flags | packEventDropped, Headers: []localstream.Header{{Key: packDroppedKey, Value: reason}},
	}}
	if truncate {
		m.Writer = m.Writer[:min(len(m.Writer), markerKeep)]
		m.RoutingKey = m.RoutingKey[:min(len(m.RoutingKey), markerKeep)]
		m.Headers[0].Value += " (routing key and writer cut to 1 KiB)"
	}
	return m
}

// packEvent turns a record decoded from a pack into a central event: a
// marker gets Dropped and loses its marker flag and header.
func packEvent(rec localstream.Record) (localstream.Record, string) {
	if !rec.Flags.Has(packEventDropped) {
		return rec, ""
	}
	rec.Flags &^= packEventDropped
	// decodePack admits a marker only with its one dropped header. An
	// empty reason reads as "unknown", as layout 1's Edge-Dropped does.
	reason := rec.Headers[0].Value
	if reason == "" {
		reason = "unknown"
	}
	rec.Headers = nil
	return rec, reason
}

// markerKeep bounds the writer and routing key a marker carries when the
// whole ones do not fit (only for keys and writers near the max payload).
const markerKeep = 1 << 10
