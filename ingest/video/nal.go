package video

// Codec is the video codec of an RTP payload type.
type Codec string

// Supported codecs. A payload type mapped to no codec is stored raw.
const (
	CodecH264 Codec = "h264"
	CodecH265 Codec = "h265"
)

// ContentType is the MIME type of chunks of this codec (Annex-B elementary stream).
func (c Codec) ContentType() string {
	switch c {
	case CodecH264:
		return "video/h264"
	case CodecH265:
		return "video/h265"
	}
	return ""
}

// startCode prefixes every NAL unit written by this package.
var startCode = []byte{0, 0, 0, 1}

// nalKind classifies a NAL unit for the assembler.
type nalKind uint8

const (
	nalOther nalKind = iota
	nalKey           // IDR (H.264) or IRAP (H.265): the frame is a keyframe
	nalVPS
	nalSPS
	nalPPS
)

// classify returns the kind of the NAL unit nal (header included).
func (c Codec) classify(nal []byte) nalKind {
	if len(nal) == 0 {
		return nalOther
	}
	if c == CodecH265 {
		switch t := (nal[0] >> 1) & 0x3f; {
		case t >= 16 && t <= 21:
			return nalKey
		case t == 32:
			return nalVPS
		case t == 33:
			return nalSPS
		case t == 34:
			return nalPPS
		}
		return nalOther
	}
	switch nal[0] & 0x1f {
	case 5:
		return nalKey
	case 7:
		return nalSPS
	case 8:
		return nalPPS
	}
	return nalOther
}

// paramSets caches the latest parameter sets of a stream so that they can be
// put before every keyframe.
type paramSets struct {
	vps, sps, pps []byte
}

// update remembers nal if it is a parameter set.
func (p *paramSets) update(k nalKind, nal []byte) {
	switch k {
	case nalVPS:
		p.vps = append(p.vps[:0], nal...)
	case nalSPS:
		p.sps = append(p.sps[:0], nal...)
	case nalPPS:
		p.pps = append(p.pps[:0], nal...)
	}
}

// prefix returns the Annex-B parameter sets missing from a keyframe that
// already carries the kinds in have (bit i set = nalKind i present).
func (p *paramSets) prefix(c Codec, have uint8) []byte {
	var out []byte
	add := func(k nalKind, nal []byte) {
		if len(nal) > 0 && have&(1<<k) == 0 {
			out = append(out, startCode...)
			out = append(out, nal...)
		}
	}
	if c == CodecH265 {
		add(nalVPS, p.vps)
	}
	add(nalSPS, p.sps)
	add(nalPPS, p.pps)
	return out
}

// complete reports whether the cache has every parameter set the codec needs.
func (p *paramSets) complete(c Codec) bool {
	if c == CodecH265 && len(p.vps) == 0 {
		return false
	}
	return len(p.sps) > 0 && len(p.pps) > 0
}
