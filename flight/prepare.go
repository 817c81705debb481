package flight

import (
	"crypto/sha256"
	"encoding/json"
	"strings"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
)

// eventKind is what an event becomes in a record.
type eventKind uint8

const (
	kindRaw     eventKind = iota // the payload as stored, on /raw/<stream>/<key>
	kindGap                      // a marker or shed event, on /flight/gaps
	kindVideo                    // a video chunk: one CompressedVideo per access unit
	kindMAVLink                  // one MAVLink frame, and its position if it has one
	kindJSON                     // MQTT telemetry or health, and its position if it has one
)

// prepared is what an event becomes, worked out from the event alone by
// its stream's reader goroutine (readAhead) so that decoding and hashing
// run beside the writing: the merge only writes. prepare is the same
// whether it runs there or in line (TestSmallRecord).
type prepared struct {
	kind     eventKind
	position string       // the event's position at the centre (its entry's)
	chunk    *video.Chunk // kindVideo
	// sum is the SHA-256 of the payload as the record holds it (an
	// entry's payload_sha256): a video chunk's access units, a shed
	// marker's or a data event's payload, nothing of a marker.
	sum [32]byte
	// pos is the position the event reports (MAVLink GLOBAL_POSITION_INT
	// from the autopilot, or lat/lon in telemetry JSON), when hasPos.
	hasPos        bool
	lat, lon, alt float64
}

// prepare works out what event it becomes. It is called by one goroutine
// at a time per stream (its decoder is the stream's).
func (s *streamRead) prepare(it *centralread.Item) (prepared, error) {
	rec := &it.Event.Record
	p := prepared{position: rec.Position.String()}
	switch {
	case it.Event.Dropped != "":
		p.kind, p.sum = kindGap, sha256.Sum256(nil)
		return p, nil
	case rec.Flags.Has(localstream.FlagGap):
		p.kind, p.sum = kindGap, sha256.Sum256(rec.Payload)
		return p, nil
	case strings.HasPrefix(rec.ContentType, "video/"):
		if c, err := video.DecodeChunk(rec.Event); err == nil {
			total := 0
			for _, fr := range c.Frames {
				total += fr.Size
			}
			p.kind, p.chunk, p.sum = kindVideo, c, sha256.Sum256(c.Payload[:total])
			return p, nil
		}
	case rec.ContentType == mavlink.ContentType:
		p.kind, p.sum = kindMAVLink, sha256.Sum256(rec.Payload)
		if s.dec == nil {
			var err error
			if s.dec, err = newMavDecoder(); err != nil {
				return p, err
			}
		}
		if m := s.dec.decode(rec); m != nil {
			p.lat, p.lon, p.alt, p.hasPos = mavPosition(m)
		}
		return p, nil
	case isJSON(rec):
		p.kind, p.sum = kindJSON, sha256.Sum256(rec.Payload)
		if !s.health {
			p.lat, p.lon, p.alt, p.hasPos = jsonPosition(rec.Payload)
		}
		return p, nil
	}
	p.kind, p.sum = kindRaw, sha256.Sum256(rec.Payload)
	return p, nil
}

func isJSON(rec *localstream.Record) bool {
	ct := rec.ContentType
	return (ct == "application/json" || strings.HasSuffix(ct, "+json")) && !rec.Flags.Has(localstream.FlagRaw) && json.Valid(rec.Payload)
}

// jsonPosition is the position a telemetry message reports: lat, lon
// and alt (or latitude, longitude and altitude) at its top level.
func jsonPosition(payload []byte) (lat, lon, alt float64, ok bool) {
	var p struct {
		Lat       *float64 `json:"lat"`
		Lon       *float64 `json:"lon"`
		Alt       *float64 `json:"alt"`
		Latitude  *float64 `json:"latitude"`
		Longitude *float64 `json:"longitude"`
		Altitude  *float64 `json:"altitude"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return 0, 0, 0, false
	}
	la, lo, al := p.Lat, p.Lon, p.Alt
	if la == nil {
		la, lo, al = p.Latitude, p.Longitude, p.Altitude
	}
	if la == nil || lo == nil {
		return 0, 0, 0, false
	}
	if al != nil {
		alt = *al
	}
	return *la, *lo, alt, true
}
