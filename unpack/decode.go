package unpack

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/wire"
)

// Event is one derived message decoded.
type Event struct {
	// CentralEvent is the event as the source holds it (Seq: the source
	// message's sequence).
	wire.CentralEvent
	// Watermark is the committed watermark of its transaction (no cut).
	Watermark wire.WatermarkJSON
	// SourceIndex is its index in the source message.
	SourceIndex int
}

// Decode decodes a derived message (subject, headers, payload), of a
// stream with one partition or with many (edgeev.<stream>.p<i>.<agent>.
// <key>), for Go consumers and tests; other tools read the headers as
// they are.
func Decode(subj string, h nats.Header, data []byte) (Event, error) {
	parts := strings.Split(subj, ".")
	if len(parts) == 5 && parts[0] == "edgeev" {
		// A partition's subject (whether i is the agent's partition
		// needs the count, which the subject does not carry).
		i, err := strconv.Atoi(strings.TrimPrefix(parts[2], "p"))
		if !strings.HasPrefix(parts[2], "p") || err != nil || i < 0 || i >= MaxPartitions || strconv.Itoa(i) != parts[2][1:] {
			return Event{}, fmt.Errorf("%w: subject %q: partition token %q is not p<i>", wire.ErrCorruptRecord, subj, parts[2])
		}
		parts = append(parts[:2], parts[3:]...)
	}
	if len(parts) != 4 || parts[0] != "edgeev" {
		return Event{}, fmt.Errorf("%w: subject %q is not edgeev.<stream>[.p<i>].<agent>.<key>", wire.ErrCorruptRecord, subj)
	}
	if parts[3] == OwnKeyToken {
		parts[3] = parts[2] // the agent's own events: key = agent id
	}
	// The headers are a layout-1 data message's: decode it as one.
	ev, err := wire.DecodeEvent("edge."+parts[1]+"."+parts[2]+".data."+parts[3], h, data)
	if err != nil {
		return Event{}, err
	}
	pos, _, err := cursorOf(h)
	if err != nil {
		return Event{}, err
	}
	ev.Seq = pos.seq
	out := Event{CentralEvent: ev, SourceIndex: pos.index}
	lo, err1 := strconv.ParseInt(h.Get(HdrWatermarkLower), 10, 64)
	hi, err2 := strconv.ParseInt(h.Get(HdrWatermarkUpper), 10, 64)
	if err1 != nil || err2 != nil {
		return Event{}, fmt.Errorf("%w: %s=%q %s=%q", wire.ErrCorruptRecord, HdrWatermarkLower, h.Get(HdrWatermarkLower), HdrWatermarkUpper, h.Get(HdrWatermarkUpper))
	}
	out.Watermark = wire.WatermarkJSON{LowerNs: lo, UpperNs: hi}
	return out, nil
}
