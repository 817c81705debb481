package live

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edge-agent/edge-agent/wire"
	"github.com/nats-io/nats.go"
)

// StreamName is the JetStream stream of the live lane. No local stream
// maps to it (those are EDGE_<STREAM>).
const StreamName = "EDGELIVE"

// subjectPrefix starts every live subject; it shares no subject with the
// backlog's "edge.<stream>.>".
const subjectPrefix = "edgelive."

// Header names of a live message (see the package doc).
const (
	hdrSegment    = "Edge-Segment"
	hdrOffset     = "Edge-Offset"
	hdrEventTime  = "Edge-Event-Time"
	hdrIngestTime = "Edge-Ingest-Time"
	hdrSentTime   = "Edge-Sent-Time"
	hdrWriter     = "Edge-Writer"
	hdrRoutingKey = "Edge-Routing-Key"
	hdrKeyframe   = "Edge-Keyframe"
	hdrContent    = "Content-Type"
	hdrTTL        = "Nats-TTL"
)

// Subject is the live subject of a drone's latest value of a stream.
func Subject(agent, stream, drone string) string {
	return subjectPrefix + wire.EscapeToken(agent) + "." + wire.EscapeToken(stream) + "." + wire.KeyToken(drone)
}

// filter is the subject filter of Read's options ("" matches all).
func filter(agent, stream, drone string) string {
	tok := func(s string, esc func(string) string) string {
		if s == "" {
			return "*"
		}
		return esc(s)
	}
	return subjectPrefix + tok(agent, wire.EscapeToken) + "." + tok(stream, wire.EscapeToken) + "." + tok(drone, wire.KeyToken)
}

// value is one drone's latest value as the lane holds it.
type value struct {
	drone, writer, contentType string
	segment                    uint64
	offset                     uint64
	eventNs, ingestNs          int64
	keyframe                   bool
	payload                    []byte
}

// message renders v as the live message of agent's stream, sent at now.
func (v *value) message(agent, stream string, now time.Time, ttl time.Duration) *nats.Msg {
	m := nats.NewMsg(Subject(agent, stream, v.drone))
	h := m.Header
	h.Set(hdrSegment, strconv.FormatUint(v.segment, 10))
	h.Set(hdrOffset, strconv.FormatUint(v.offset, 10))
	h.Set(hdrEventTime, strconv.FormatInt(v.eventNs, 10))
	h.Set(hdrIngestTime, strconv.FormatInt(v.ingestNs, 10))
	h.Set(hdrSentTime, strconv.FormatInt(now.UnixNano(), 10))
	h.Set(hdrWriter, wire.EncodeHeaderValue(v.writer))
	h.Set(hdrRoutingKey, wire.EncodeHeaderValue(v.drone))
	if v.contentType != "" {
		h.Set(hdrContent, wire.EncodeHeaderValue(v.contentType))
	}
	if v.keyframe {
		h.Set(hdrKeyframe, "1")
	}
	if ttl > 0 {
		h.Set(hdrTTL, strconv.FormatInt(int64(ttl/time.Second), 10)+"s")
	}
	m.Data = v.payload
	return m
}

// wireSize is what publishing m puts on the link: the HPUB line, the
// header block and the payload with its CRLF (nats.go writes exactly
// this for a publish without a reply subject).
func wireSize(m *nats.Msg) int {
	hdr := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			hdr += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	total := hdr + len(m.Data)
	line := len("HPUB ") + len(m.Subject) + 1 + len(strconv.Itoa(hdr)) + 1 + len(strconv.Itoa(total)) + len("\r\n")
	return line + total + len("\r\n")
}

// decode reads a live message back into a Value (without Age and Covered).
func decode(subject string, h nats.Header, data []byte) (Value, error) {
	rest, ok := strings.CutPrefix(subject, subjectPrefix)
	toks := strings.Split(rest, ".")
	if !ok || len(toks) != 3 {
		return Value{}, fmt.Errorf("live: subject %q is not a live subject", subject)
	}
	agent, err1 := wire.UnescapeToken(toks[0])
	stream, err2 := wire.UnescapeToken(toks[1])
	drone, err3 := wire.DecodeHeaderValue(h.Get(hdrRoutingKey))
	if err := firstErr(err1, err2, err3); err != nil {
		return Value{}, fmt.Errorf("live: subject %q: %w", subject, err)
	}
	if wire.KeyToken(drone) != toks[2] {
		return Value{}, fmt.Errorf("live: subject %q does not match routing key %q", subject, drone)
	}
	v := Value{Agent: agent, Stream: stream, Drone: drone, Keyframe: h.Get(hdrKeyframe) == "1", Payload: data}
	var errs [5]error
	v.Segment, errs[0] = strconv.ParseUint(h.Get(hdrSegment), 10, 64)
	v.Offset, errs[1] = strconv.ParseUint(h.Get(hdrOffset), 10, 64)
	v.EventTimeNs, errs[2] = strconv.ParseInt(h.Get(hdrEventTime), 10, 64)
	v.IngestTimeNs, errs[3] = strconv.ParseInt(h.Get(hdrIngestTime), 10, 64)
	v.SentTimeNs, errs[4] = strconv.ParseInt(h.Get(hdrSentTime), 10, 64)
	if err := firstErr(errs[:]...); err != nil {
		return Value{}, fmt.Errorf("live: %s: bad header: %w", subject, err)
	}
	if v.Writer, err1 = wire.DecodeHeaderValue(h.Get(hdrWriter)); err1 != nil {
		return Value{}, fmt.Errorf("live: %s: writer: %w", subject, err1)
	}
	if v.ContentType, err1 = wire.DecodeHeaderValue(h.Get(hdrContent)); err1 != nil {
		return Value{}, fmt.Errorf("live: %s: content type: %w", subject, err1)
	}
	return v, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
