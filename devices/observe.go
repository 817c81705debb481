package devices

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// Header keys the ingest packages put on their events, read by SourceOf.
// They are copied here (devices does not import the ingest packages).
const (
	headerMQTTTopic = "mqtt-topic" // telemetry.HeaderTopic
	headerSSRC      = "ssrc"       // video.HeaderSSRC (8 hex digits)
)

// SourceRTP names an RTP source: "rtp:ssrc=<8 hex>" and, when addr is
// known, "@<addr>".
func SourceRTP(ssrc uint32, addr string) string {
	if addr == "" {
		return fmt.Sprintf("rtp:ssrc=%08x", ssrc)
	}
	return fmt.Sprintf("rtp:ssrc=%08x@%s", ssrc, addr)
}

// SourceMQTT names an MQTT source: "mqtt:<topic>".
func SourceMQTT(topic string) string { return "mqtt:" + topic }

// SourceOf names the source of an event from its headers: the MQTT topic
// of a telemetry event, the SSRC of a video chunk, else "writer:<writer>".
func SourceOf(ev *localstream.Event) string { return sourceOf(ev).String() }

// source is a source name in two parts, so that a sighting of a known
// source builds no string (see Registry.seen).
type source struct{ kind, name string }

func sourceOf(ev *localstream.Event) source {
	if t, ok := ev.Header(headerMQTTTopic); ok {
		return source{"mqtt:", t}
	}
	if s, ok := ev.Header(headerSSRC); ok {
		return source{"rtp:ssrc=", s}
	}
	return source{"writer:", ev.Writer}
}

// String is the source's id.
func (s source) String() string { return s.kind + s.name }

// appendTo appends the source's id to b.
func (s source) appendTo(b []byte) []byte { return append(append(b, s.kind...), s.name...) }

// Appender is the synchronous append of a stream (the video ingest's
// sink, the health sampler); satisfied by *localstream.Stream.
type Appender interface {
	Append(ctx context.Context, ev localstream.Event, opts ...localstream.AppendOption) (localstream.Position, error)
}

// AsyncAppender is the asynchronous append of a stream (the telemetry
// ingest's sink); satisfied by *localstream.Stream.
type AsyncAppender interface {
	AppendAsync(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error
}

// Observe wraps a stream's Append so that every durable append is recorded
// in the registry (Seen with SourceOf, the payload size, and the event's
// ingest time) and every failed one is counted as a drop ("disk_full" for
// localstream.ErrDiskFull, else "store_error"). Gap markers are not drone
// activity and pass through unrecorded.
func (r *Registry) Observe(a Appender) Appender { return observed{a: a, r: r} }

// ObserveAsync is Observe for AppendAsync: the registry is updated in the
// callback, once the outcome is known; callback order is unchanged.
func (r *Registry) ObserveAsync(a AsyncAppender) AsyncAppender { return observedAsync{a: a, r: r} }

// GroupAppender appends groups of events (the MAVLink intake's sink);
// satisfied by *localstream.Stream.
type GroupAppender interface {
	AppendGroupAsync(ctx context.Context, evs []localstream.Event, cb func([]localstream.Position, error), opts ...localstream.AppendOption) error
}

// ObserveGroup is ObserveAsync for AppendGroupAsync: each event of a group
// is recorded once the group's outcome is known.
func (r *Registry) ObserveGroup(a GroupAppender) GroupAppender { return observedGroup{a: a, r: r} }

type observedGroup struct {
	a GroupAppender
	r *Registry
}

func (o observedGroup) AppendGroupAsync(ctx context.Context, evs []localstream.Event, cb func([]localstream.Position, error), opts ...localstream.AppendOption) error {
	ss := make([]sighting, len(evs)) // the callback keeps these: the caller reuses evs
	for i := range evs {
		ss[i] = sightingOf(&evs[i])
	}
	note := func(err error) {
		for _, s := range ss {
			o.r.noteSighting(s, err)
		}
	}
	err := o.a.AppendGroupAsync(ctx, evs, func(p []localstream.Position, err error) {
		note(err)
		cb(p, err)
	}, opts...)
	if err != nil {
		note(err)
	}
	return err
}

type observed struct {
	a Appender
	r *Registry
}

func (o observed) Append(ctx context.Context, ev localstream.Event, opts ...localstream.AppendOption) (localstream.Position, error) {
	pos, err := o.a.Append(ctx, ev, opts...)
	o.r.note(&ev, err)
	return pos, err
}

type observedAsync struct {
	a AsyncAppender
	r *Registry
}

func (o observedAsync) AppendAsync(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error {
	s := sightingOf(&ev) // the callback keeps this, not a copy of the event
	err := o.a.AppendAsync(ctx, ev, func(p localstream.Position, err error) {
		o.r.noteSighting(s, err)
		cb(p, err)
	}, opts...)
	if err != nil {
		o.r.noteSighting(s, err)
	}
	return err
}

// sighting is what the registry records of one append.
type sighting struct {
	drone  string
	src    source
	bytes  int
	ingest int64
	gap    bool
}

func sightingOf(ev *localstream.Event) sighting {
	return sighting{drone: ev.RoutingKey, src: sourceOf(ev), bytes: len(ev.Payload), ingest: ev.IngestTime,
		gap: ev.Flags.Has(localstream.FlagGap)}
}

// note records the outcome of one append.
func (r *Registry) note(ev *localstream.Event, err error) { r.noteSighting(sightingOf(ev), err) }

func (r *Registry) noteSighting(s sighting, err error) {
	if s.gap {
		return
	}
	if err != nil {
		r.Drop(s.drone, DropReason(err))
		return
	}
	var now time.Time
	if s.ingest > 0 {
		now = time.Unix(0, s.ingest)
	} else {
		now = r.cfg.Now() // only here: a clock read costs more than the rest of a sighting
	}
	var buf [128]byte
	r.seen(s.drone, s.src.appendTo(buf[:0]), s.bytes, now)
}

// DropReason is the drop-counter reason of an append error.
func DropReason(err error) string {
	switch {
	case errors.Is(err, localstream.ErrDiskFull):
		return "disk_full"
	case errors.Is(err, localstream.ErrEventTooLarge):
		return "too_large"
	case errors.Is(err, localstream.ErrInvalidEvent):
		return "invalid"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "store_error"
}

// Marks is what the ingest needs from a stream's watermark tracker
// (satisfied by *watermark.Tracker); the health sampler uses Note.
type Marks interface {
	// Admit, before the append, gives the event's flags (late, clock
	// skew) and the bound of its mark (docs/design.md rule 12).
	Admit(writer string, eventTimeNs, ingestNs int64) watermark.Admission
	// NoteAdmitted records the event's bounded time at its durable
	// position (after the append).
	NoteAdmitted(writer string, a watermark.Admission, eventTimeNs int64, pos localstream.Position) error
	// CloseWriter stops a writer from holding the watermark back.
	CloseWriter(writer string) error
}

// ObserveOffline wraps the telemetry ingest's Marks: the ingest closes a
// drone's writer ("<kind>/<drone>") when the drone's status or last will
// says offline, so CloseWriter also marks the drone offline (explicit) in
// the registry. Wrap only the telemetry marks: the video ingest closes its
// writer when the RTP flow stops, which does not make the drone offline.
func (r *Registry) ObserveOffline(m Marks) Marks { return offlineMarks{Marks: m, r: r} }

type offlineMarks struct {
	Marks
	r *Registry
}

func (o offlineMarks) CloseWriter(writer string) error {
	err := o.Marks.CloseWriter(writer)
	if _, drone, ok := strings.Cut(writer, "/"); ok && drone != "" {
		o.r.SetOnline(drone, false, o.r.cfg.Now())
	}
	return err
}
