package video

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// spropParameterSets extracts the parameter sets from an SDP fmtp value:
// "sprop-parameter-sets=<b64>,<b64>" (H.264, RFC 6184) or
// "sprop-vps=..; sprop-sps=..; sprop-pps=.." (H.265, RFC 7798).
func spropParameterSets(fmtp string) ([][]byte, error) {
	var out [][]byte
	for _, kv := range strings.Split(fmtp, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "sprop-parameter-sets", "sprop-vps", "sprop-sps", "sprop-pps":
			for _, b := range strings.Split(v, ",") {
				nal, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b))
				if err != nil || len(nal) == 0 {
					return nil, fmt.Errorf("%w: fmtp %s: bad base64 %q", ErrConfig, k, b)
				}
				out = append(out, nal)
			}
		}
	}
	return out, nil
}

// SDPVideo is the video media of an SDP description as this package needs it.
type SDPVideo struct {
	// Port is the RTP port of the m=video line.
	Port int
	// PayloadType is the first payload type of the m=video line.
	PayloadType uint8
	// Codec from a=rtpmap ("H264" or "H265"), "" when not supported.
	Codec Codec
	// ClockRate from a=rtpmap.
	ClockRate int
	// Fmtp is the a=fmtp value for the payload type.
	Fmtp string
}

// ParseSDP reads the first m=video section of an SDP description.
func ParseSDP(sdp string) (SDPVideo, error) {
	var v SDPVideo
	in := false
	for _, line := range strings.Split(sdp, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "m=") {
			if in {
				break
			}
			var proto string
			var pt int
			if _, err := fmt.Sscanf(line, "m=video %d %s %d", &v.Port, &proto, &pt); err != nil {
				continue
			}
			in, v.PayloadType = true, uint8(pt)
			continue
		}
		if !in {
			continue
		}
		prefix := fmt.Sprintf("a=rtpmap:%d ", v.PayloadType)
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			name, rate, _ := strings.Cut(rest, "/")
			switch strings.ToUpper(name) {
			case "H264":
				v.Codec = CodecH264
			case "H265", "HEVC":
				v.Codec = CodecH265
			}
			fmt.Sscanf(rate, "%d", &v.ClockRate)
		}
		if rest, ok := strings.CutPrefix(line, fmt.Sprintf("a=fmtp:%d ", v.PayloadType)); ok {
			v.Fmtp = rest
		}
	}
	if !in {
		return v, fmt.Errorf("%w: sdp has no m=video line", ErrConfig)
	}
	return v, nil
}
