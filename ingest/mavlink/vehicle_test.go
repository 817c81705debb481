package mavlink

import (
	"math"
	"testing"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"
	"github.com/bluenviron/gomavlib/v3/pkg/message"
)

// TestVehicleState: the autopilot's mode, armed flag, battery and
// position read from frames gomavlib encodes (v1 and v2, truncated zeros).
func TestVehicleState(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		w := newWriter(t, v1, 1, 1, nil)
		var v Vehicle
		for _, m := range []message.Message{
			&ardupilotmega.MessageHeartbeat{Type: 2, Autopilot: 3, BaseMode: 217, CustomMode: 5, SystemStatus: 4, MavlinkVersion: 3},
			&ardupilotmega.MessageSysStatus{BatteryRemaining: 87, VoltageBattery: 16000},
			&ardupilotmega.MessageGlobalPositionInt{Lat: 473977420, Lon: -85455940, Alt: 508123},
		} {
			f, _, _ := split(w.frame(t, m), DefaultDialect())
			v.note(&f, 42)
		}
		if !v.Armed || v.Mode != "LOITER" || v.BatteryPct != 87 || math.Abs(v.Lat-47.397742) > 1e-9 || math.Abs(v.Lon+8.545594) > 1e-9 || v.AltM != 508.123 || v.PositionNs != 42 {
			t.Fatalf("v1 %v: %+v", v1, v)
		}
		hb, _, _ := split(w.frame(t, &ardupilotmega.MessageHeartbeat{Type: 1, Autopilot: 12, BaseMode: 1, CustomMode: 65536}), DefaultDialect())
		v.note(&hb, 43)
		if v.Armed || v.Mode != "custom 65536" {
			t.Fatalf("a PX4 plane, disarmed: %+v", v)
		}
	}
}
