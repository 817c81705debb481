package unpack

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/wire"
)

// Headers a derived message has besides the layout-1 data headers (see
// the package doc).
const (
	HdrWatermarkLower = "Edge-Watermark-Lower"
	HdrWatermarkUpper = "Edge-Watermark-Upper"
	HdrSourceSeq      = "Edge-Source-Seq"
	HdrSourceIndex    = "Edge-Source-Index"
)

// position is an event's place in the source stream: the sequence of the
// message that holds it and its index there.
type position struct {
	seq   uint64
	index int
}

// after reports whether p comes after q.
func (p position) after(q position) bool {
	return p.seq > q.seq || p.seq == q.seq && p.index > q.index
}

// sourced is one decoded event with its source position.
type sourced struct {
	pos position
	ev  wire.CentralEvent
}

// derivedMsg builds the derived message of ev, committed with watermark
// wm. An event that would not fit maxPayload becomes a marker
// (oversize reports it).
func derivedMsg(stream string, s sourced, wm wire.WatermarkJSON, maxPayload int64) (m *nats.Msg, oversize bool) {
	ev := s.ev
	if ev.Dropped != "" {
		m = wire.EncodeMarker(stream, ev.Agent, ev.Txn, ev.Record, ev.Dropped, false)
	} else {
		m = wire.EncodeEvent(stream, ev.Agent, ev.Txn, ev.Record)
	}
	finish := func(m *nats.Msg) *nats.Msg {
		m.Subject = EventSubject(stream, ev.Agent, ev.Record.RoutingKey)
		m.Header[HdrWatermarkLower] = []string{strconv.FormatInt(wm.LowerNs, 10)}
		m.Header[HdrWatermarkUpper] = []string{strconv.FormatInt(wm.UpperNs, 10)}
		m.Header[HdrSourceSeq] = []string{strconv.FormatUint(s.pos.seq, 10)}
		m.Header[HdrSourceIndex] = []string{strconv.Itoa(s.pos.index)}
		return m
	}
	m = finish(m)
	if maxPayload <= 0 || msgSize(m) <= maxPayload {
		return m, false
	}
	reason := fmt.Sprintf("unpack: %d bytes with headers, over the max payload %d", msgSize(m), maxPayload)
	m = finish(wire.EncodeMarker(stream, ev.Agent, ev.Txn, ev.Record, reason, false))
	if msgSize(m) > maxPayload {
		m = finish(wire.EncodeMarker(stream, ev.Agent, ev.Txn, ev.Record, reason, true))
	}
	return m, true
}

// msgSize is what the server counts against its max payload: the
// payload and the encoded headers.
func msgSize(m *nats.Msg) int64 {
	n := int64(len(m.Data)) + int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range m.Header {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// cursorOf reads the source position a derived message names.
func cursorOf(h nats.Header) (position, error) {
	seq, err1 := strconv.ParseUint(h.Get(HdrSourceSeq), 10, 64)
	idx, err2 := strconv.Atoi(h.Get(HdrSourceIndex))
	if err1 != nil || err2 != nil || seq == 0 || idx < 0 {
		return position{}, fmt.Errorf("%w: %s=%q %s=%q", ErrBadCursor, HdrSourceSeq, h.Get(HdrSourceSeq), HdrSourceIndex, h.Get(HdrSourceIndex))
	}
	return position{seq: seq, index: idx}, nil
}
