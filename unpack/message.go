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
// payload, less the headers the publisher adds to every message (its
// fence: fenceReserve). A zero max is no limit.
type limit struct {
	max, reserve int64
}

// fits reports whether m fits with the publisher's headers.
func (l limit) fits(m *nats.Msg) bool { return l.max <= 0 || msgSize(m)+l.reserve <= l.max }

// derivedMsg builds the derived message of ev, committed with watermark
// wm, fresh (a builder of its own). An event that would not fit lim
// becomes a marker (oversize reports it).
func derivedMsg(p Partition, s sourced, wm wire.WatermarkJSON, lim limit) (m *nats.Msg, oversize bool) {
	return newBuilder(p, lim).event(&s, wm)
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

// builder builds derived messages: the one way they are built. An event
// goes into one of two reused messages and header maps, in turn (see
// wire.PutEventHeader): the publisher holds the message of the previous
// event until it sends it at the next add (nats.go copies a message when
// it publishes), so a message is rewritten only after it was sent.
// Markers (an event dropped at the agent, one over the max payload) are
// built fresh. It is not safe for concurrent use.
type builder struct {
	part Partition
	lim  limit
	msgs [2]nats.Msg
	// turn is the index in msgs of the message built last.
	turn int
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
	b := &builder{part: p, lim: lim, subjects: map[subjectKey]subjectToken{}}
	for i := range b.msgs {
		b.msgs[i].Header = make(nats.Header, 24)
	}
	return b
}

// event returns the derived message of s, committed with watermark wm:
// a reused message, valid until the next call but one, or a fresh
// marker. An event that would not fit the limit becomes a marker
// (oversize reports it).
func (b *builder) event(s *sourced, wm wire.WatermarkJSON) (m *nats.Msg, oversize bool) {
	ev := s.ev
	b.source(s.pos.seq, wm)
	if ev.Dropped != "" {
		m = b.marker(s, ev.Dropped, false)
	} else {
		m = b.reused(s)
	}
	if b.lim.fits(m) {
		return m, false
	}
	reason := fmt.Sprintf("unpack: %d bytes with headers, over the max payload %d", msgSize(m)+b.lim.reserve, b.lim.max)
	if m = b.marker(s, reason, false); !b.lim.fits(m) {
		m = b.marker(s, reason, true)
	}
	return m, true
}

// reused builds the message of event s into the next reused message.
func (b *builder) reused(s *sourced) *nats.Msg {
	ev := s.ev
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
	b.turn ^= 1
	m := &b.msgs[b.turn]
	// The publisher's fence from the message's last use: not counted
	// twice (lim.reserve counts it).
	delete(m.Header, jetstream.ExpectedLastSeqHeader)
	wire.PutEventHeader(m.Header, ev.Txn, st.token, ev.Record)
	b.finish(m, s.pos.index)
	m.Subject, m.Reply, m.Data = st.subject, "", ev.Record.Payload
	return m
}

// marker is the marker of s (fresh) saying reason; truncate cuts its
// routing key and writer (wire.EncodeMarker).
func (b *builder) marker(s *sourced, reason string, truncate bool) *nats.Msg {
	ev := s.ev
	m := wire.EncodeMarker(b.part.Stream, ev.Agent, ev.Txn, ev.Record, reason, truncate)
	m.Subject = b.part.EventSubject(ev.Agent, ev.Record.RoutingKey)
	b.finish(m, s.pos.index)
	return m
}

// source notes the source message and watermark of the events to come,
// formatting their header values once.
func (b *builder) source(seq uint64, wm wire.WatermarkJSON) {
	if seq != b.seq || wm.LowerNs != b.lowerNs || wm.UpperNs != b.upperNs || b.seqText == "" {
		b.seq, b.lowerNs, b.upperNs = seq, wm.LowerNs, wm.UpperNs
		b.seqText = strconv.FormatUint(seq, 10)
		b.lower, b.upper = strconv.FormatInt(wm.LowerNs, 10), strconv.FormatInt(wm.UpperNs, 10)
	}
}

// finish sets the unpacker's own headers: the watermark and the source
// position.
func (b *builder) finish(m *nats.Msg, index int) {
	putHeader(m.Header, HdrWatermarkLower, b.lower)
	putHeader(m.Header, HdrWatermarkUpper, b.upper)
	putHeader(m.Header, HdrSourceSeq, b.seqText)
	putHeader(m.Header, HdrSourceIndex, strconv.Itoa(index))
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
// oversize check (with the publisher's reserve).
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
