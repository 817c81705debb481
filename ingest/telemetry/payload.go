package telemetry

import (
	"bytes"
	"encoding/hex"
	"encoding/json"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/localstream"
)

// Stored-event headers and content types.
const (
	// HeaderTopic is the event header holding the MQTT topic.
	HeaderTopic = "mqtt-topic"
	// HeaderRedelivered marks a redelivery (DUP) that no dedup entry
	// matched: its value is the message's dedup identity, the hex of
	// sha256(topic 0x00 payload)[:16]. Such a message is stored, and it
	// repeats an earlier event only when the entry went with the store
	// that held it (a data directory removed or replaced between the
	// append and the PUBACK); the replicator then finds the first copy in
	// the centre's tail and does not send it again (Repeat,
	// replicate.RepeatFunc). Stats.Redelivered counts them.
	HeaderRedelivered = "mqtt-redelivered"
	// ContentTypeJSON is the content type of JSON payloads.
	ContentTypeJSON = "application/json"
)

// WriterFor is the writer id of a drone's telemetry: "telemetry/<drone>".
func WriterFor(drone string) string { return "telemetry/" + drone }

// buildEvent turns one message into an event, by the documented policy:
//
//   - valid JSON: content type application/json; the event time from
//     TimeField if present and usable, else the receive time with
//     FlagEstimatedTime (counted TimeEstimated; TimeInvalid if the field was
//     there but unusable: wrong type, unparsable string, out of range);
//   - anything else (truncated JSON, MAVLink, empty): stored as received with
//     BinaryContentType, FlagRaw and FlagEstimatedTime, counted InvalidJSON
//     if it starts like JSON ('{' or '[') else Binary.
func (in *Ingester) buildEvent(l *lane, topic string, payload []byte, recv int64) localstream.Event {
	ev := localstream.Event{
		RoutingKey: l.drone,
		Writer:     l.writer,
		IngestTime: recv,
		Headers:    l.topicHeaders(topic),
		Payload:    payload,
	}
	if maybeJSON(payload) && json.Valid(payload) {
		ev.ContentType = ContentTypeJSON
		st := timeMissing
		if len(in.timePath) > 0 {
			ev.EventTime, st = eventTime(payload, in.timePath, in.cfg.TimeUnit)
		}
		if st != timeOK {
			if st == timeInvalid {
				in.c.timeInvalid.Add(1)
			}
			in.c.timeEstimated.Add(1)
			ev.EventTime, ev.Flags = recv, localstream.FlagEstimatedTime
		}
		return ev
	}
	ev.ContentType = in.cfg.BinaryContentType
	ev.EventTime, ev.Flags = recv, localstream.FlagRaw|localstream.FlagEstimatedTime
	in.c.timeEstimated.Add(1)
	if t := bytes.TrimLeft(payload, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		in.c.invalidJSON.Add(1)
	} else {
		in.c.binary.Add(1)
	}
	return ev
}

// parseStatus reads a status payload: "online"/"offline" as plain text,
// a JSON string, or a JSON object's "status" field (case-insensitive).
func parseStatus(payload []byte) (online, known bool) {
	s := string(bytes.ToLower(bytes.TrimSpace(payload)))
	var js string
	if json.Unmarshal([]byte(s), &js) == nil {
		s = js
	} else {
		var obj struct {
			Status string `json:"status"`
		}
		if json.Unmarshal([]byte(s), &obj) == nil {
			s = obj.Status
		}
	}
	switch s {
	case "online", "connected", "up":
		return true, true
	case "offline", "disconnected", "down", "landed":
		return false, true
	}
	return false, false
}

// maybeJSON reports whether payload could be JSON at all: its first byte
// past white space can start a JSON value. json.Valid says so too, but a
// binary payload (MAVLink, CBOR, the peers harness's random bytes) fails
// there by building a SyntaxError, with its message formatted: 3 % of the
// agent's CPU per event on such telemetry.
func maybeJSON(payload []byte) bool {
	t := bytes.TrimLeft(payload, " \t\r\n")
	if len(t) == 0 {
		return false
	}
	switch c := t[0]; {
	case c == '{', c == '[', c == '"', c == '-', c == 't', c == 'f', c == 'n', '0' <= c && c <= '9':
		return true
	}
	return false
}

// RedeliveryID is the dedup identity of a message on topic with payload,
// as HeaderRedelivered holds it: the hex of sha256(topic 0x00
// payload)[:16]. The replicator computes it for the centre's tail to find
// the copy a marked event repeats (Repeat).
func RedeliveryID(topic string, payload []byte) string {
	h := dedup.HashMessage(topic, payload)
	return hex.EncodeToString(h[:])
}

// Repeat is the replicate.RepeatFunc of the telemetry stream: an event
// with an MQTT topic has the identity RedeliveryID(topic, payload) (as
// HeaderRedelivered holds it when marked); marked reports the header.
// Events without a topic (MAVLink frames, gap markers) have none.
func Repeat(rec *localstream.Record) (id string, marked, ok bool) {
	topic, ok := rec.Header(HeaderTopic)
	if !ok {
		return "", false, false
	}
	if id, marked := rec.Header(HeaderRedelivered); marked {
		return id, true, true
	}
	return RedeliveryID(topic, rec.Payload), false, true
}

// markRedelivered adds HeaderRedelivered to ev. The topic headers are a
// lane's shared slice: appended to a copy.
func markRedelivered(ev *localstream.Event, h dedup.Hash) {
	hs := make([]localstream.Header, len(ev.Headers), len(ev.Headers)+1)
	copy(hs, ev.Headers)
	ev.Headers = append(hs, localstream.Header{Key: HeaderRedelivered, Value: hex.EncodeToString(h[:])})
}
