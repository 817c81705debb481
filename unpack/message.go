package unpack

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/wire"
)

// Headers a derived message has besides the layout-1 data headers (see
// the package doc).
const (
	HdrWatermarkLower = "Edge-Watermark-Lower"
	HdrWatermarkUpper = "Edge-Watermark-Upper"
	HdrSourceSeq      = "Edge-Source-Seq"
	HdrSourceIndex    = "Edge-Source-Index"
	// HdrSourceSkipped is "1" on a skip marker: the source message at
	// Edge-Source-Seq did not decode and was skipped whole by the
	// operator (Options.Skip).
	HdrSourceSkipped = "Edge-Source-Skipped"
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

// limit is what a derived message may take on the wire: the server's max
// payload, less the headers the sender adds to every message (its fence,
// a batch's headers; sender.reserve). A zero max is no limit.
type limit struct {
	max, reserve int64
}

// fits reports whether m fits with the sender's headers.
func (l limit) fits(m *nats.Msg) bool { return l.max <= 0 || msgSize(m)+l.reserve <= l.max }

// derivedMsg builds the derived message of ev, committed with watermark
// wm. An event that would not fit lim becomes a marker (oversize reports
// it).
func derivedMsg(p Partition, s sourced, wm wire.WatermarkJSON, lim limit) (m *nats.Msg, oversize bool) {
	ev, stream := s.ev, p.Stream
	if ev.Dropped != "" {
		m = wire.EncodeMarker(stream, ev.Agent, ev.Txn, ev.Record, ev.Dropped, false)
	} else {
		m = wire.EncodeEvent(stream, ev.Agent, ev.Txn, ev.Record)
	}
	finish := func(m *nats.Msg) *nats.Msg {
		m.Subject = p.EventSubject(ev.Agent, ev.Record.RoutingKey)
		m.Header[HdrWatermarkLower] = []string{strconv.FormatInt(wm.LowerNs, 10)}
		m.Header[HdrWatermarkUpper] = []string{strconv.FormatInt(wm.UpperNs, 10)}
		m.Header[HdrSourceSeq] = []string{strconv.FormatUint(s.pos.seq, 10)}
		m.Header[HdrSourceIndex] = []string{strconv.Itoa(s.pos.index)}
		return m
	}
	m = finish(m)
	if lim.fits(m) {
		return m, false
	}
	reason := fmt.Sprintf("unpack: %d bytes with headers, over the max payload %d", msgSize(m)+lim.reserve, lim.max)
	m = finish(wire.EncodeMarker(stream, ev.Agent, ev.Txn, ev.Record, reason, false))
	if !lim.fits(m) {
		m = finish(wire.EncodeMarker(stream, ev.Agent, ev.Txn, ev.Record, reason, true))
	}
	return m, true
}

// skipMarker is the marker of source message seq on subject, skipped by
// the operator because it does not decode (cause): on the subject of
// its agent and the empty routing key, with no position, transaction or
// watermark (all 0), Edge-Dropped naming it and Edge-Source-Skipped.
func skipMarker(p Partition, seq uint64, subject string, cause error) *nats.Msg {
	stream, agent := p.Stream, ""
	if tok := sourceAgentToken(subject); tok != "" {
		if a, err := wire.UnescapeToken(tok); err == nil {
			agent = a
		}
	}
	reason := fmt.Sprintf("unpack: source message %d (%s) skipped by the operator (--skip %d): %v", seq, subject, seq, cause)
	m := wire.EncodeMarker(stream, agent, 0, localstream.Record{}, reason, false)
	if msgSize(m) > 4096 {
		m = wire.EncodeMarker(stream, agent, 0, localstream.Record{}, reason[:2048], false)
	}
	m.Subject = p.EventSubject(agent, "")
	m.Header[HdrWatermarkLower] = []string{"0"}
	m.Header[HdrWatermarkUpper] = []string{"0"}
	m.Header[HdrSourceSeq] = []string{strconv.FormatUint(seq, 10)}
	m.Header[HdrSourceIndex] = []string{"0"}
	m.Header[HdrSourceSkipped] = []string{"1"}
	return m
}

// builder builds derived messages into one reused message and header
// map (see wire.PutEventHeader): for a publisher that sends each message
// before it asks for the next (nats.go copies a message when it
// publishes). Markers and oversize events are built fresh, by derivedMsg.
// It is not safe for concurrent use.
type builder struct {
	part Partition
	lim  limit
	msg  nats.Msg
	// subjects caches each agent and routing key's subject and token
	// (cleared when it reaches maxSubjects).
	subjects map[subjectKey]subjectToken
	// The current source message: its sequence, watermark, and their
	// header values.
	seq                   uint64
	lowerNs, upperNs      int64
	seqText, lower, upper string
}

type subjectKey struct{ agent, key string }

type subjectToken struct{ subject, token string }

// maxSubjects bounds the builder's subject cache.
const maxSubjects = 1 << 14

func newBuilder(p Partition, lim limit) *builder {
	return &builder{part: p, lim: lim, msg: nats.Msg{Header: make(nats.Header, 24)}, subjects: map[subjectKey]subjectToken{}}
}

// event returns the derived message of s, committed with watermark wm:
// the reused message, valid until the next call, or a fresh one.
func (b *builder) event(s sourced, wm wire.WatermarkJSON) (m *nats.Msg, oversize bool) {
	ev := s.ev
	if ev.Dropped != "" {
		return derivedMsg(b.part, s, wm, b.lim)
	}
	if s.pos.seq != b.seq || wm.LowerNs != b.lowerNs || wm.UpperNs != b.upperNs || b.seqText == "" {
		b.seq, b.lowerNs, b.upperNs = s.pos.seq, wm.LowerNs, wm.UpperNs
		b.seqText = strconv.FormatUint(s.pos.seq, 10)
		b.lower, b.upper = strconv.FormatInt(wm.LowerNs, 10), strconv.FormatInt(wm.UpperNs, 10)
	}
	k := subjectKey{ev.Agent, ev.Record.RoutingKey}
	st, ok := b.subjects[k]
	if !ok {
		if len(b.subjects) >= maxSubjects {
			clear(b.subjects)
		}
		st.token = wire.KeyToken(ev.Record.RoutingKey)
		st.subject = b.part.EventSubject(ev.Agent, ev.Record.RoutingKey)
		b.subjects[k] = st
	}
	m = &b.msg
	h := m.Header
	delete(h, jetstream.ExpectedLastSeqHeader)
	wire.PutEventHeader(h, ev.Txn, st.token, ev.Record)
	putHeader(h, HdrWatermarkLower, b.lower)
	putHeader(h, HdrWatermarkUpper, b.upper)
	putHeader(h, HdrSourceSeq, b.seqText)
	putHeader(h, HdrSourceIndex, strconv.Itoa(s.pos.index))
	m.Subject, m.Reply, m.Data = st.subject, "", ev.Record.Payload
	if !b.lim.fits(m) {
		return derivedMsg(b.part, s, wm, b.lim)
	}
	return m, false
}

// putHeader sets h[k] to v alone, reusing a value slice of one.
func putHeader(h nats.Header, k, v string) {
	if vs := h[k]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[k] = []string{v}
}

// msgSize is what the server counts against its max payload: the
// payload and the encoded header block ("NATS/1.0\r\n", a "k: v\r\n"
// line per value, "\r\n"). It is the one size of a derived message: the
// oversize check (with the sender's reserve) and the bytes in flight.
func msgSize(m *nats.Msg) int64 {
	n := int64(len(m.Data)) + int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range m.Header {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// cursorOf reads the source position a derived message names;
// skipped is set on a skip marker (the whole source message skipped).
func cursorOf(h nats.Header) (pos position, skipped bool, err error) {
	seq, err1 := strconv.ParseUint(h.Get(HdrSourceSeq), 10, 64)
	idx, err2 := strconv.Atoi(h.Get(HdrSourceIndex))
	if err1 != nil || err2 != nil || seq == 0 || idx < 0 {
		return position{}, false, fmt.Errorf("%w: %s=%q %s=%q", ErrBadCursor, HdrSourceSeq, h.Get(HdrSourceSeq), HdrSourceIndex, h.Get(HdrSourceIndex))
	}
	return position{seq: seq, index: idx}, h.Get(HdrSourceSkipped) == "1", nil
}

// headerLine is the bytes one header of a value of n bytes adds.
func headerLine(k string, n int) int64 { return int64(len(k) + n + 4) }
