package mqttwire

import "errors"

var (
	// ErrPacketTooLarge: a packet's remaining length is above the reader's
	// bound; it is refused before anything is allocated.
	ErrPacketTooLarge = errors.New("telemetry: mqtt packet too large")
	// ErrMalformed: bytes that are no MQTT 3.1.1 packet.
	ErrMalformed = errors.New("telemetry: malformed mqtt packet")
	// ErrSlowReader: a publisher let its unread PUBACKs pile up.
	ErrSlowReader = errors.New("telemetry: publisher does not read its acks")
)
