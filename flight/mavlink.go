package flight

import (
	"bufio"
	"bytes"
	"sync"

	"github.com/bluenviron/gomavlib/v3/pkg/dialect"
	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/message"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/localstream"
)

// MAVLink facts a record uses: the autopilot's component id, the armed
// bit of HEARTBEAT base_mode (MAV_MODE_FLAG_SAFETY_ARMED) and the two
// message ids read (the stored frame's mavlink-msgid header says which
// frames to decode at all).
const (
	mavCompAutopilot = 1
	mavModeArmed     = 0x80
	mavMsgHeartbeat  = "0"
	mavMsgGlobalPos  = "33"
)

// mavDecoder decodes stored frames (each event's payload is one frame,
// byte for byte as received) with gomavlib's frame reader and
// ardupilotmega dialect. Signatures are not checked here: the intake
// checked them before storing. Not safe for concurrent use.
type mavDecoder struct {
	src *bytes.Reader
	r   *frame.Reader
}

// dialectRW is gomavlib's ardupilotmega reader, built once (it takes
// milliseconds: every message's fields are reflected on) and read-only
// after.
var dialectRW = sync.OnceValues(func() (*dialect.ReadWriter, error) {
	rw := &dialect.ReadWriter{Dialect: ardupilotmega.Dialect}
	return rw, rw.Initialize()
})

func newMavDecoder() (*mavDecoder, error) {
	rw, err := dialectRW()
	if err != nil {
		return nil, err
	}
	src := bytes.NewReader(nil)
	r := &frame.Reader{BufByteReader: bufio.NewReaderSize(src, 512), DialectRW: rw}
	if err := r.Initialize(); err != nil {
		return nil, err
	}
	return &mavDecoder{src: src, r: r}, nil
}

// decode returns the frame's message when it is one of the messages a
// record reads, from the autopilot.
func (d *mavDecoder) decode(rec *localstream.Record) message.Message {
	if rec.ContentType != mavlink.ContentType {
		return nil
	}
	if id, ok := rec.Header(mavlink.HeaderMsgID); !ok || (id != mavMsgHeartbeat && id != mavMsgGlobalPos) {
		return nil
	}
	d.src.Reset(rec.Payload)
	d.r.BufByteReader.Reset(d.src)
	f, err := d.r.Read()
	if err != nil || f.GetComponentID() != mavCompAutopilot {
		return nil
	}
	return f.GetMessage()
}

// mavAirborne is a HEARTBEAT's armed bit.
func mavAirborne(m message.Message) (airborne, ok bool) {
	hb, ok := m.(*ardupilotmega.MessageHeartbeat)
	if !ok {
		return false, false
	}
	return uint8(hb.BaseMode)&mavModeArmed != 0, true
}

// mavPosition is a GLOBAL_POSITION_INT's fix: degrees and metres MSL.
func mavPosition(m message.Message) (lat, lon, alt float64, ok bool) {
	p, ok := m.(*ardupilotmega.MessageGlobalPositionInt)
	if !ok {
		return 0, 0, 0, false
	}
	return float64(p.Lat) / 1e7, float64(p.Lon) / 1e7, float64(p.Alt) / 1000, true
}
