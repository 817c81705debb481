package localstream

import "fmt"

// Flags are the boolean headers of an event.
type Flags uint16

const (
	// FlagKeyframe marks a video chunk that starts with a keyframe.
	FlagKeyframe Flags = 1 << iota
	// FlagDiscontinuity marks the first event after a gap in its source
	// (restart, packet loss, clock jump).
	FlagDiscontinuity
	// FlagLate marks an event whose time is before a watermark already published.
	FlagLate
	// FlagEstimatedTime marks an event time taken from arrival, not the source.
	FlagEstimatedTime
	// FlagGap marks a gap marker: events were shed by policy; the payload says which.
	FlagGap
	// FlagRaw marks a payload stored as received because it could not be parsed.
	FlagRaw
	// FlagClockSkew marks an event whose time lies outside the receiving
	// clock's bounds (watermark.Options.MaxClockSkew / MaxClockBehind): it
	// keeps its own time, but its watermark mark is bounded.
	FlagClockSkew
)

// Has reports whether all bits of g are set.
func (f Flags) Has(g Flags) bool { return f&g == g }

// Header is one small key/value header of an event (MQTT topic, SSRC,
// frame PTS list, ...). Keys are short ASCII; the store keeps them in order.
type Header struct {
	Key   string
	Value string
}

// Event is what sources append: one telemetry message, one video chunk,
// one health sample, or one gap marker.
type Event struct {
	// RoutingKey is the drone id (or the agent id for health); all events of
	// one key are totally ordered.
	RoutingKey string
	// Writer is the stable id of the source (e.g. "video/drone-1").
	Writer string
	// EventTime is the source's time in Unix ns, UTC; 0 = unknown.
	EventTime int64
	// IngestTime is when the agent received it, Unix ns.
	IngestTime int64
	// Flags are the boolean headers.
	Flags Flags
	// ContentType is the MIME type of the payload.
	ContentType string
	// Headers are further small headers.
	Headers []Header
	// Payload is the event's bytes.
	Payload []byte
}

// Header returns the value of the first header named key.
func (e *Event) Header(key string) (string, bool) {
	for _, h := range e.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// Position is where an event lives: its segment and its offset inside it.
type Position struct {
	Segment SegmentID `json:"segment"`
	Offset  uint64    `json:"offset"`
}

// String renders "epoch.number@offset".
func (p Position) String() string { return fmt.Sprintf("%s@%d", p.Segment, p.Offset) }

// Record is an event read back with its position.
type Record struct {
	Position
	Event
}
