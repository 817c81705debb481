package mavlink

import (
	"encoding/binary"
	"fmt"

	"github.com/bluenviron/gomavlib/v3/pkg/message"
	"github.com/bluenviron/gomavlib/v3/pkg/x25"
)

// Encode builds one unsigned frame of msg (v2, or v1 when v1 is set and
// the message id fits) with gomavlib's message encoding: the intake's own
// heartbeats, and frames for tests.
func (d *Dialect) Encode(v1 bool, seq, sysid, compid uint8, msg message.Message) ([]byte, error) {
	id := msg.GetID()
	info, ok := d.byID[id]
	if !ok {
		return nil, fmt.Errorf("mavlink: message %d is not in the dialect", id)
	}
	raw := d.rw.GetMessage(id).Write(msg, !v1)
	var b []byte
	if v1 {
		if id > 255 {
			return nil, fmt.Errorf("mavlink: message %d needs MAVLink 2", id)
		}
		b = append(b, magicV1, byte(len(raw.Payload)), seq, sysid, compid, byte(id))
	} else {
		b = append(b, magicV2, byte(len(raw.Payload)), 0, 0, seq, sysid, compid, byte(id), byte(id>>8), byte(id>>16))
	}
	b = append(b, raw.Payload...)
	h := x25.New()
	h.Write(b[1:])
	h.Write([]byte{info.crcExtra})
	return binary.LittleEndian.AppendUint16(b, h.Sum16()), nil
}
