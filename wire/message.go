package wire

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
)

// Header names of data messages (docs/central-format.md).
const (
	HdrSegment        = "Edge-Segment"
	HdrOffset         = "Edge-Offset"
	HdrEventTime      = "Edge-Event-Time"
	HdrIngestTime     = "Edge-Ingest-Time"
	HdrWriter         = "Edge-Writer"
	HdrTxn            = "Edge-Txn"
	HdrLate           = "Edge-Late"
	HdrDiscontinuity  = "Edge-Discontinuity"
	HdrKeyframe       = "Edge-Keyframe"
	HdrEstimatedTime  = "Edge-Estimated-Time"
	HdrGap            = "Edge-Gap"
	HdrRaw            = "Edge-Raw"
	HdrClockSkew      = "Edge-Clock-Skew"
	HdrContentType    = "Content-Type"
	HdrMqttTopic      = "Edge-Mqtt-Topic"
	HdrFramePts       = "Edge-Frame-Pts"
	HdrHeaders        = "Edge-Headers"
	HdrRoutingKey     = "Edge-Routing-Key"
	HdrDropped        = "Edge-Dropped"
	HdrTruncated      = "Edge-Truncated"
	localMqttTopicKey = "mqtt-topic"
	localFramePtsKey  = "frame-pts"
)

// flagHeaders maps event flags to their headers.
var flagHeaders = []struct {
	flag localstream.Flags
	hdr  string
}{
	{localstream.FlagLate, HdrLate},
	{localstream.FlagDiscontinuity, HdrDiscontinuity},
	{localstream.FlagKeyframe, HdrKeyframe},
	{localstream.FlagEstimatedTime, HdrEstimatedTime},
	{localstream.FlagGap, HdrGap},
	{localstream.FlagRaw, HdrRaw},
	{localstream.FlagClockSkew, HdrClockSkew},
}

// EncodeEvent builds the data message of one local record in transaction txn.
func EncodeEvent(stream, agent string, txn uint64, rec localstream.Record) *nats.Msg {
	tok := KeyToken(rec.RoutingKey)
	m := nats.NewMsg(dataSubject(stream, agent, tok))
	PutEventHeader(m.Header, txn, tok, rec)
	m.Data = rec.Payload
	return m
}

// PutEventHeader writes the headers of rec's data message in transaction
// txn into h, tok being the subject token of its routing key (KeyToken).
// h may hold another event's headers: every header an event can have is
// set or removed, and a value slice of one is reused, so that a publisher
// can build each message in one map (nats.go copies headers when it
// publishes) without allocating one per header.
func PutEventHeader(h nats.Header, txn uint64, tok string, rec localstream.Record) {
	putHeader(h, HdrSegment, strconv.FormatUint(uint64(rec.Segment), 10))
	putHeader(h, HdrOffset, strconv.FormatUint(rec.Offset, 10))
	putHeader(h, HdrEventTime, strconv.FormatInt(rec.EventTime, 10))
	putHeader(h, HdrIngestTime, strconv.FormatInt(rec.IngestTime, 10))
	putHeader(h, HdrWriter, EncodeHeaderValue(rec.Writer))
	putHeader(h, HdrTxn, strconv.FormatUint(txn, 10))
	putHeaderIf(h, hashedToken(tok), HdrRoutingKey, func() string { return EncodeHeaderValue(rec.RoutingKey) })
	for _, f := range flagHeaders {
		putHeaderIf(h, rec.Flags.Has(f.flag), f.hdr, func() string { return "1" })
	}
	putHeaderIf(h, rec.ContentType != "", HdrContentType, func() string { return EncodeHeaderValue(rec.ContentType) })
	var topic, pts bool
	var order []string
	for _, kv := range rec.Headers {
		switch {
		case kv.Key == localMqttTopicKey && !topic:
			topic = true
			putHeader(h, HdrMqttTopic, EncodeHeaderValue(kv.Value))
		case kv.Key == localFramePtsKey && !pts:
			pts = true
			putHeader(h, HdrFramePts, EncodeHeaderValue(kv.Value))
		default:
			order = append(order, url.QueryEscape(kv.Key)+"="+url.QueryEscape(kv.Value))
		}
	}
	if !topic {
		delete(h, HdrMqttTopic)
	}
	if !pts {
		delete(h, HdrFramePts)
	}
	putHeaderIf(h, len(order) > 0, HdrHeaders, func() string { return strings.Join(order, "&") })
}

// putHeader sets h[k] to v alone, reusing a value slice of one.
func putHeader(h nats.Header, k, v string) {
	if vs := h[k]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[k] = []string{v}
}

// putHeaderIf sets h[k] to v() when set holds, and removes it otherwise.
func putHeaderIf(h nats.Header, set bool, k string, v func() string) {
	if set {
		putHeader(h, k, v())
	} else {
		delete(h, k)
	}
}

// EncodeMarker builds the marker that replaces, at the centre, an event
// that cannot be sent: its position, routing key, writer, times and
// flags, the reason in Edge-Dropped, and no payload.
//
// truncate cuts the writer and routing key the marker carries to their
// first markerKeep bytes and sets Edge-Truncated (for the rare key or
// writer too long for even a marker); the subject keeps the whole key's
// token, so a drone filter still finds the marker.
func EncodeMarker(stream, agent string, txn uint64, rec localstream.Record, reason string, truncate bool) *nats.Msg {
	tok := KeyToken(rec.RoutingKey)
	if truncate {
		rec.Writer = rec.Writer[:min(len(rec.Writer), markerKeep)]
		rec.RoutingKey = rec.RoutingKey[:min(len(rec.RoutingKey), markerKeep)]
	}
	m := encodePosition(stream, agent, txn, tok, rec)
	if truncate {
		m.Header[HdrTruncated] = []string{"1"}
	}
	for _, f := range flagHeaders {
		if rec.Flags.Has(f.flag) {
			m.Header[f.hdr] = []string{"1"}
		}
	}
	m.Header[HdrDropped] = []string{EncodeHeaderValue(reason)}
	return m
}

// encodePosition starts a data message: subject and the headers every
// data message has.
func encodePosition(stream, agent string, txn uint64, tok string, rec localstream.Record) *nats.Msg {
	m := nats.NewMsg(dataSubject(stream, agent, tok))
	h := m.Header
	putHeader(h, HdrSegment, strconv.FormatUint(uint64(rec.Segment), 10))
	putHeader(h, HdrOffset, strconv.FormatUint(rec.Offset, 10))
	putHeader(h, HdrEventTime, strconv.FormatInt(rec.EventTime, 10))
	putHeader(h, HdrIngestTime, strconv.FormatInt(rec.IngestTime, 10))
	putHeader(h, HdrWriter, EncodeHeaderValue(rec.Writer))
	putHeader(h, HdrTxn, strconv.FormatUint(txn, 10))
	if hashedToken(tok) {
		putHeader(h, HdrRoutingKey, EncodeHeaderValue(rec.RoutingKey))
	}
	return m
}

// CentralEvent is one data message read back from the central store.
type CentralEvent struct {
	// Seq is the JetStream stream sequence.
	Seq uint64
	// Stream and Agent name the local stream and the agent that wrote it.
	Stream, Agent string
	// Txn is the transaction that committed it.
	Txn uint64
	// Record is the event as it was appended locally, with its position.
	// Headers come back as: mqtt-topic, frame-pts, then the others in their
	// original order.
	Record localstream.Record
	// Dropped is set on a marker: the event at Record's position could not
	// be sent (the reason); Record has its position, routing key, writer
	// and times, and no payload.
	Dropped string
}

// DecodeEvent decodes a data message. subj is its subject, h its headers.
func DecodeEvent(subj string, h nats.Header, data []byte) (CentralEvent, error) {
	p, err := parseSubject(subj)
	if err != nil {
		return CentralEvent{}, err
	}
	if p.kind != subjectData {
		return CentralEvent{}, fmt.Errorf("%w: %q is not a data subject", ErrCorruptRecord, subj)
	}
	ev := CentralEvent{Stream: p.stream, Agent: p.agent}
	r := &ev.Record
	r.RoutingKey = p.routingKey
	text := func(key string) (string, error) {
		v, err := DecodeHeaderValue(h.Get(key))
		if err != nil {
			return "", fmt.Errorf("header %s: %w", key, err)
		}
		return v, nil
	}
	if hashedToken(p.keyToken) {
		if r.RoutingKey, err = text(HdrRoutingKey); err != nil {
			return CentralEvent{}, err
		}
		if KeyToken(r.RoutingKey) != p.keyToken && h.Get(HdrTruncated) != "1" {
			return CentralEvent{}, fmt.Errorf("%w: header %s does not match the subject token %q", ErrCorruptRecord, HdrRoutingKey, p.keyToken)
		}
	}
	num := func(key string, bits int, signed bool) (uint64, int64, error) {
		v := h.Get(key)
		if signed {
			n, err := strconv.ParseInt(v, 10, bits)
			if err != nil {
				return 0, 0, fmt.Errorf("%w: header %s=%q", ErrCorruptRecord, key, v)
			}
			return 0, n, nil
		}
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: header %s=%q", ErrCorruptRecord, key, v)
		}
		return n, 0, nil
	}
	var seg uint64
	if seg, _, err = num(HdrSegment, 64, false); err != nil {
		return CentralEvent{}, err
	}
	r.Segment = localstream.SegmentID(seg)
	if r.Offset, _, err = num(HdrOffset, 64, false); err != nil {
		return CentralEvent{}, err
	}
	if _, r.EventTime, err = num(HdrEventTime, 64, true); err != nil {
		return CentralEvent{}, err
	}
	if h.Get(HdrIngestTime) != "" {
		if _, r.IngestTime, err = num(HdrIngestTime, 64, true); err != nil {
			return CentralEvent{}, err
		}
	}
	if ev.Txn, _, err = num(HdrTxn, 64, false); err != nil {
		return CentralEvent{}, err
	}
	if r.Writer, err = text(HdrWriter); err != nil {
		return CentralEvent{}, err
	}
	for _, f := range flagHeaders {
		if h.Get(f.hdr) == "1" {
			r.Flags |= f.flag
		}
	}
	if r.ContentType, err = text(HdrContentType); err != nil {
		return CentralEvent{}, err
	}
	if _, ok := h[HdrDropped]; ok {
		if ev.Dropped, err = text(HdrDropped); err != nil {
			return CentralEvent{}, err
		}
		if ev.Dropped == "" {
			ev.Dropped = "unknown"
		}
	}
	for _, k := range []struct{ hdr, local string }{{HdrMqttTopic, localMqttTopicKey}, {HdrFramePts, localFramePtsKey}} {
		if v, ok := h[k.hdr]; ok && len(v) > 0 {
			dv, err := DecodeHeaderValue(v[0])
			if err != nil {
				return CentralEvent{}, fmt.Errorf("header %s: %w", k.hdr, err)
			}
			r.Headers = append(r.Headers, localstream.Header{Key: k.local, Value: dv})
		}
	}
	if s := h.Get(HdrHeaders); s != "" {
		for part := range strings.SplitSeq(s, "&") {
			k, v, _ := strings.Cut(part, "=")
			kk, err1 := url.QueryUnescape(k)
			vv, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil {
				return CentralEvent{}, fmt.Errorf("%w: header %s=%q", ErrCorruptRecord, HdrHeaders, s)
			}
			r.Headers = append(r.Headers, localstream.Header{Key: kk, Value: vv})
		}
	}
	r.Payload = data
	return ev, nil
}
