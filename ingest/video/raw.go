package video

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// ContentTypeRawRTP is the content type of a batch of raw RTP packets.
const ContentTypeRawRTP = "application/x-rtp-batch"

// HeaderPackets is the number of packets in a raw batch.
const HeaderPackets = "packets"

// rawBatch collects packets of unknown payload types. Layout (doc.go):
//
//	( [arrival Unix ns, int64 BE][length uint16 BE][RTP packet] )*
type rawBatch struct {
	buf   []byte
	n     int
	first time.Time
}

func (r *rawBatch) add(pkt []byte, arrival time.Time) {
	if r.n == 0 {
		r.first = arrival
	}
	r.buf = binary.BigEndian.AppendUint64(r.buf, uint64(arrival.UnixNano()))
	r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(len(pkt)))
	r.buf = append(r.buf, pkt...)
	r.n++
}

// take returns the batch as an event and empties it.
func (r *rawBatch) take(drone string, ingestNs int64) localstream.Event {
	ev := localstream.Event{
		RoutingKey:  drone,
		Writer:      WriterID(drone),
		EventTime:   r.first.UnixNano(),
		IngestTime:  ingestNs,
		Flags:       localstream.FlagRaw | localstream.FlagEstimatedTime,
		ContentType: ContentTypeRawRTP,
		Headers:     []localstream.Header{{Key: HeaderPackets, Value: strconv.Itoa(r.n)}},
		Payload:     r.buf,
	}
	r.buf, r.n = nil, 0
	return ev
}

// RawPacket is one packet of a raw batch.
type RawPacket struct {
	// Arrival is when the agent received it, Unix ns.
	Arrival int64
	// Data is the whole RTP packet.
	Data []byte
}

// DecodeRawBatch splits a raw RTP batch payload into its packets.
func DecodeRawBatch(p []byte) ([]RawPacket, error) {
	var out []RawPacket
	for len(p) > 0 {
		if len(p) < 10 {
			return nil, fmt.Errorf("%w: raw batch record header truncated (%d bytes)", ErrChunk, len(p))
		}
		ts := int64(binary.BigEndian.Uint64(p))
		n := int(binary.BigEndian.Uint16(p[8:]))
		if n > len(p)-10 {
			return nil, fmt.Errorf("%w: raw packet of %d bytes, %d left", ErrChunk, n, len(p)-10)
		}
		out = append(out, RawPacket{Arrival: ts, Data: p[10 : 10+n]})
		p = p[10+n:]
	}
	return out, nil
}
