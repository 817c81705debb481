package mavlink

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/bluenviron/gomavlib/v3/pkg/dialect"
	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/message"
)

// Dialect is what the intake knows of the messages: their CRC_EXTRA (to
// check a frame), name, and where a time_boot_ms field sits in the
// payload. It is built once from a gomavlib dialect and read-only after.
type Dialect struct {
	rw    *dialect.ReadWriter
	byID  map[uint32]*msgInfo
	names map[string]uint32
}

// msgInfo describes one message of the dialect.
type msgInfo struct {
	name     string
	idText   string // the id, decimal: the mavlink-msgid header
	crcExtra byte
	// bootMsAt is the payload offset of a uint32 time_boot_ms field; -1: none.
	bootMsAt int
	// typ is the gomavlib message type (to decode for readers).
	typ reflect.Type
}

var (
	defaultDialect     *Dialect
	defaultDialectOnce sync.Once
)

// DefaultDialect is ArduPilot's dialect (ardupilotmega, which includes
// common and minimal: what PX4 and ArduPilot send), as gomavlib defines it.
func DefaultDialect() *Dialect {
	defaultDialectOnce.Do(func() {
		d, err := NewDialect(ardupilotmega.Dialect)
		if err != nil {
			panic(fmt.Sprintf("mavlink: gomavlib's dialect does not load: %v", err))
		}
		defaultDialect = d
	})
	return defaultDialect
}

// NewDialect reads a gomavlib dialect.
func NewDialect(dd *dialect.Dialect) (*Dialect, error) {
	rw := &dialect.ReadWriter{Dialect: dd}
	if err := rw.Initialize(); err != nil {
		return nil, err
	}
	d := &Dialect{rw: rw, byID: map[uint32]*msgInfo{}, names: map[string]uint32{}}
	for _, m := range dd.Messages {
		mp := rw.GetMessage(m.GetID())
		typ := reflect.TypeOf(m).Elem()
		info := &msgInfo{name: messageName(typ.Name()), idText: strconv.FormatUint(uint64(m.GetID()), 10), crcExtra: mp.CRCExtra(), bootMsAt: -1, typ: typ}
		if f, ok := typ.FieldByName("TimeBootMs"); ok && f.Type.Kind() == reflect.Uint32 {
			info.bootMsAt = fieldOffset(mp, typ, f.Index[0])
		}
		d.byID[m.GetID()] = info
		d.names[info.name] = m.GetID()
	}
	return d, nil
}

// fieldOffset finds where field i of typ lands in the wire payload: it
// writes a message whose only non-zero field is a marker and looks for
// the marker (MAVLink reorders fields by size, so the struct's order is
// not the wire's).
func fieldOffset(mp *message.ReadWriter, typ reflect.Type, i int) int {
	const marker = 0xA1B2C3D4
	v := reflect.New(typ)
	v.Elem().Field(i).SetUint(marker)
	raw := mp.Write(v.Interface().(message.Message), true)
	p := raw.Payload
	for k := 0; k+4 <= len(p); k++ {
		if p[k] == 0xD4 && p[k+1] == 0xC3 && p[k+2] == 0xB2 && p[k+3] == 0xA1 {
			return k
		}
	}
	return -1
}

var capital = regexp.MustCompile("([A-Z])")

// messageName turns gomavlib's type name (MessageGlobalPositionInt) into
// the MAVLink name (GLOBAL_POSITION_INT).
func messageName(goName string) string {
	s := capital.ReplaceAllString(strings.TrimPrefix(goName, "Message"), "_${1}")
	return strings.ToUpper(strings.TrimPrefix(s, "_"))
}

// fieldName turns a Go field name (TimeBootMs) into the MAVLink one (time_boot_ms).
func fieldName(goName string) string {
	s := capital.ReplaceAllString(goName, "_${1}")
	return strings.ToLower(strings.TrimPrefix(s, "_"))
}

func (d *Dialect) lookup(id uint32) (*msgInfo, bool) {
	info, ok := d.byID[id]
	return info, ok
}

// ID returns the id of the message named name (GLOBAL_POSITION_INT).
func (d *Dialect) ID(name string) (uint32, bool) {
	id, ok := d.names[strings.ToUpper(name)]
	return id, ok
}

// Name returns the name of message id, or "" when the dialect lacks it.
func (d *Dialect) Name(id uint32) string {
	if info, ok := d.byID[id]; ok {
		return info.name
	}
	return ""
}

// Message is a frame decoded with the dialect, for readers.
type Message struct {
	// Name is the message's MAVLink name (ATTITUDE).
	Name string `json:"name"`
	// ID is the message id.
	ID uint32 `json:"id"`
	// SysID, CompID and Seq are the frame's header fields.
	SysID  uint8 `json:"sysid"`
	CompID uint8 `json:"compid"`
	Seq    uint8 `json:"seq"`
	// Version is 1 or 2.
	Version int `json:"version"`
	// Signed: the frame carries a MAVLink 2 signature.
	Signed bool `json:"signed,omitempty"`
	// Fields are the message's fields by MAVLink name (time_boot_ms).
	Fields map[string]any `json:"fields"`
}

// Decode checks raw as one whole frame and decodes its message.
func (d *Dialect) Decode(raw []byte) (Message, error) {
	f, n, res := split(raw, d)
	if res != splitFrame || n != len(raw) {
		return Message{}, fmt.Errorf("mavlink: not one frame of the dialect (%d bytes)", len(raw))
	}
	mp := d.rw.GetMessage(f.MsgID)
	m, err := mp.Read(&message.MessageRaw{ID: f.MsgID, Payload: append([]byte(nil), f.Payload...)}, f.V2)
	if err != nil {
		return Message{}, fmt.Errorf("mavlink: decode message %d: %w", f.MsgID, err)
	}
	out := Message{Name: d.byID[f.MsgID].name, ID: f.MsgID, SysID: f.SysID, CompID: f.CompID, Seq: f.Seq,
		Version: 1, Signed: f.Signed, Fields: map[string]any{}}
	if f.V2 {
		out.Version = 2
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		out.Fields[fieldName(v.Type().Field(i).Name)] = jsonValue(v.Field(i))
	}
	return out, nil
}

// jsonValue is v as JSON can hold it: a float that is NaN or infinite
// (JSON has none) becomes its name as a string, also inside arrays.
func jsonValue(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Sprint(f)
		}
	case reflect.Array:
		if k := v.Type().Elem().Kind(); k == reflect.Float32 || k == reflect.Float64 {
			out := make([]any, v.Len())
			for i := range out {
				out[i] = jsonValue(v.Index(i))
			}
			return out
		}
	}
	return v.Interface()
}
