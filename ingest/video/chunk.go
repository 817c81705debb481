package video

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/edge-agent/edge-agent/localstream"
)

// Header keys of a video chunk event (see doc.go).
const (
	HeaderCodec      = "codec"
	HeaderSSRC       = "ssrc"
	HeaderFramePTS   = "frame-pts"
	HeaderFrameSizes = "frame-sizes"
	HeaderFrameKeys  = "frame-keys"
)

// Chunk is consecutive complete frames of one drone in Annex-B.
type Chunk struct {
	// Codec of the frames.
	Codec Codec
	// SSRC of the RTP stream the frames came from.
	SSRC uint32
	// Frames describe the frames in payload order.
	Frames []FrameInfo
	// Payload is the frames' Annex-B bytes, concatenated.
	Payload []byte
	// Estimated is true when the PTS come from arrival times (no SR yet).
	Estimated bool
	// Discontinuity is true when something is missing before the first frame.
	Discontinuity bool
}

// FrameInfo is one frame of a chunk.
type FrameInfo struct {
	// PTS is the frame's wall-clock presentation time, Unix ns.
	PTS int64
	// Size is the frame's length in the payload, in bytes.
	Size int
	// Key is true for a keyframe (IDR / IRAP), preceded by its parameter sets.
	Key bool
}

// Event renders the chunk as a localstream event of drone's video writer.
func (c *Chunk) Event(drone string, ingestNs int64) localstream.Event {
	var pts, sizes, keys strings.Builder
	for i, f := range c.Frames {
		if i > 0 {
			pts.WriteByte(',')
			sizes.WriteByte(',')
		}
		pts.WriteString(strconv.FormatInt(f.PTS, 10))
		sizes.WriteString(strconv.Itoa(f.Size))
		if f.Key {
			if keys.Len() > 0 {
				keys.WriteByte(',')
			}
			keys.WriteString(strconv.Itoa(i))
		}
	}
	ev := localstream.Event{
		RoutingKey:  drone,
		Writer:      WriterID(drone),
		IngestTime:  ingestNs,
		ContentType: c.Codec.ContentType(),
		Headers: []localstream.Header{
			{Key: HeaderCodec, Value: string(c.Codec)},
			{Key: HeaderSSRC, Value: fmt.Sprintf("%08x", c.SSRC)},
			{Key: HeaderFramePTS, Value: pts.String()},
			{Key: HeaderFrameSizes, Value: sizes.String()},
			{Key: HeaderFrameKeys, Value: keys.String()},
		},
		Payload: c.Payload,
	}
	if len(c.Frames) > 0 {
		ev.EventTime = c.Frames[0].PTS
		if c.Frames[0].Key {
			ev.Flags |= localstream.FlagKeyframe
		}
	}
	if c.Estimated {
		ev.Flags |= localstream.FlagEstimatedTime
	}
	if c.Discontinuity {
		ev.Flags |= localstream.FlagDiscontinuity
	}
	return ev
}

// WriterID is the writer id of a drone's video: "video/<drone>".
func WriterID(drone string) string { return "video/" + drone }

// DecodeChunk reads a video chunk event back: it checks that the frame
// headers agree with each other and with the payload length.
func DecodeChunk(ev localstream.Event) (*Chunk, error) {
	get := func(k string) string { v, _ := ev.Header(k); return v }
	c := &Chunk{
		Codec:         Codec(get(HeaderCodec)),
		Payload:       ev.Payload,
		Estimated:     ev.Flags.Has(localstream.FlagEstimatedTime),
		Discontinuity: ev.Flags.Has(localstream.FlagDiscontinuity),
	}
	if c.Codec != CodecH264 && c.Codec != CodecH265 {
		return nil, fmt.Errorf("%w: codec %q", ErrChunk, c.Codec)
	}
	ssrc, err := strconv.ParseUint(get(HeaderSSRC), 16, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: ssrc: %v", ErrChunk, err)
	}
	c.SSRC = uint32(ssrc)
	ptsList, sizeList := splitList(get(HeaderFramePTS)), splitList(get(HeaderFrameSizes))
	if len(ptsList) != len(sizeList) || len(ptsList) == 0 {
		return nil, fmt.Errorf("%w: %d pts for %d sizes", ErrChunk, len(ptsList), len(sizeList))
	}
	c.Frames = make([]FrameInfo, len(ptsList))
	total := 0
	for i := range ptsList {
		pts, err1 := strconv.ParseInt(ptsList[i], 10, 64)
		size, err2 := strconv.Atoi(sizeList[i])
		if err1 != nil || err2 != nil || size <= 0 || size > len(ev.Payload)-total {
			return nil, fmt.Errorf("%w: frame %d: pts %q size %q", ErrChunk, i, ptsList[i], sizeList[i])
		}
		total += size
		c.Frames[i] = FrameInfo{PTS: pts, Size: size}
	}
	if total != len(ev.Payload) {
		return nil, fmt.Errorf("%w: frames cover %d of %d payload bytes", ErrChunk, total, len(ev.Payload))
	}
	for _, k := range splitList(get(HeaderFrameKeys)) {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(c.Frames) {
			return nil, fmt.Errorf("%w: keyframe index %q", ErrChunk, k)
		}
		c.Frames[i].Key = true
	}
	if ev.Flags.Has(localstream.FlagKeyframe) != c.Frames[0].Key {
		return nil, fmt.Errorf("%w: keyframe flag disagrees with frame 0", ErrChunk)
	}
	return c, nil
}

// FrameData returns frame i's Annex-B bytes.
func (c *Chunk) FrameData(i int) []byte {
	off := 0
	for j := 0; j < i; j++ {
		off += c.Frames[j].Size
	}
	return c.Payload[off : off+c.Frames[i].Size]
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
