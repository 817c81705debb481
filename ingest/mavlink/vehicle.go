package mavlink

import "math"

// Vehicle is what the status page shows of a MAVLink drone, from its
// autopilot's (component 1) last HEARTBEAT, SYS_STATUS and
// GLOBAL_POSITION_INT.
type Vehicle struct {
	// Armed: HEARTBEAT base_mode has MAV_MODE_FLAG_SAFETY_ARMED.
	Armed bool `json:"armed"`
	// Mode is the flight mode: ArduPilot's name when the autopilot is
	// ArduPilot and the vehicle a copter, else "custom <n>".
	Mode string `json:"mode,omitempty"`
	// BatteryPct is SYS_STATUS battery_remaining; -1: not reported.
	BatteryPct int `json:"battery_pct"`
	// Lat and Lon (degrees), AltM (metres MSL) are the last position;
	// PositionNs its receive time (0: none yet).
	Lat        float64 `json:"lat"`
	Lon        float64 `json:"lon"`
	AltM       float64 `json:"alt_m"`
	PositionNs int64   `json:"position_unix_ns"`
}

const (
	msgSysStatus      = 1
	msgGlobalPosition = 33
	compAutopilot     = 1
	modeFlagArmed     = 0x80
	autopilotArdu     = 3
)

// arduCopterModes are ArduCopter's custom modes.
var arduCopterModes = map[uint32]string{0: "STABILIZE", 1: "ACRO", 2: "ALT_HOLD", 3: "AUTO", 4: "GUIDED", 5: "LOITER",
	6: "RTL", 7: "CIRCLE", 9: "LAND", 11: "DRIFT", 13: "SPORT", 16: "POSHOLD", 17: "BRAKE", 18: "THROW", 21: "SMART_RTL"}

// copterTypes are the MAV_TYPEs of multicopters and helicopters.
var copterTypes = map[uint8]bool{2: true, 3: true, 4: true, 13: true, 14: true, 15: true}

// note updates v from one of the autopilot's frames (payload offsets of
// the MAVLink wire layout, fields ordered by size).
func (v *Vehicle) note(f *Frame, recv int64) {
	if f.CompID != compAutopilot {
		return
	}
	p := f.Payload
	switch f.MsgID {
	case msgHeartbeat:
		custom, typ, autopilot, base := uint32(field(p, 0, 4)), uint8(field(p, 4, 1)), uint8(field(p, 5, 1)), uint8(field(p, 6, 1))
		v.Armed = base&modeFlagArmed != 0
		if name, ok := arduCopterModes[custom]; ok && autopilot == autopilotArdu && copterTypes[typ] {
			v.Mode = name
		} else {
			v.Mode = "custom " + itoa(int(custom))
		}
	case msgSysStatus:
		v.BatteryPct = int(int8(field(p, 30, 1)))
	case msgGlobalPosition:
		v.Lat = float64(int32(field(p, 4, 4))) / 1e7
		v.Lon = float64(int32(field(p, 8, 4))) / 1e7
		v.AltM = math.Round(float64(int32(field(p, 12, 4)))) / 1000
		v.PositionNs = recv
	}
}
