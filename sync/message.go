package sync

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
)

// Header names of data messages (see the package doc).
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
	m := nats.NewMsg(DataSubject(stream, agent, rec.RoutingKey))
	h := m.Header
	h[HdrSegment] = []string{strconv.FormatUint(uint64(rec.Segment), 10)}
	h[HdrOffset] = []string{strconv.FormatUint(rec.Offset, 10)}
	h[HdrEventTime] = []string{strconv.FormatInt(rec.EventTime, 10)}
	h[HdrIngestTime] = []string{strconv.FormatInt(rec.IngestTime, 10)}
	h[HdrWriter] = []string{rec.Writer}
	h[HdrTxn] = []string{strconv.FormatUint(txn, 10)}
	for _, f := range flagHeaders {
		if rec.Flags.Has(f.flag) {
			h[f.hdr] = []string{"1"}
		}
	}
	if rec.ContentType != "" {
		h[HdrContentType] = []string{rec.ContentType}
	}
	var order []string
	for _, kv := range rec.Headers {
		switch kv.Key {
		case localMqttTopicKey:
			if _, dup := h[HdrMqttTopic]; !dup {
				h[HdrMqttTopic] = []string{kv.Value}
				continue
			}
		case localFramePtsKey:
			if _, dup := h[HdrFramePts]; !dup {
				h[HdrFramePts] = []string{kv.Value}
				continue
			}
		}
		order = append(order, url.QueryEscape(kv.Key)+"="+url.QueryEscape(kv.Value))
	}
	if len(order) > 0 {
		h[HdrHeaders] = []string{strings.Join(order, "&")}
	}
	m.Data = rec.Payload
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
	r.Writer = h.Get(HdrWriter)
	for _, f := range flagHeaders {
		if h.Get(f.hdr) == "1" {
			r.Flags |= f.flag
		}
	}
	r.ContentType = h.Get(HdrContentType)
	if v, ok := h[HdrMqttTopic]; ok && len(v) > 0 {
		r.Headers = append(r.Headers, localstream.Header{Key: localMqttTopicKey, Value: v[0]})
	}
	if v, ok := h[HdrFramePts]; ok && len(v) > 0 {
		r.Headers = append(r.Headers, localstream.Header{Key: localFramePtsKey, Value: v[0]})
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
