package flight

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// Rule says how flights of a drone are found in its telemetry. MAVLink
// drones fly from arm to disarm (HEARTBEAT base_mode, the autopilot's
// component); an MQTT drone flies while ArmedField is true, or, without
// ArmedField, during each run of telemetry with no silence longer than
// Silence.
type Rule struct {
	// ArmedField is a dotted path to a JSON field of an MQTT drone's
	// telemetry ("armed", "status.in_air"): true, a non-zero number or a
	// non-empty string other than "false", "0", "landed", "disarmed" and
	// "on_ground" is in flight. Empty: the silence rule.
	ArmedField string
	// Silence ends an MQTT flight (silence rule). Default 30 s.
	Silence time.Duration
}

// DefaultSilence is Rule.Silence's default.
const DefaultSilence = 30 * time.Second

// Flight is one flight of a drone: the time range of its record and how
// sure its ends are. Times are event times (the drone's clock, as the
// watermarks speak), Unix ns.
type Flight struct {
	// Drone is the routing key; Agent the agent that captured it.
	Drone string `json:"drone"`
	Agent string `json:"agent"`
	// N numbers the drone's flights from 1 in time order.
	N int `json:"n"`
	// StartNs and EndNs bound the record: the last observation on the
	// ground before take-off and the first one on the ground after landing
	// (the arm and the disarm happened in between), or the first and last
	// telemetry of a silence-rule flight, or the user's range.
	StartNs int64 `json:"start_ns"`
	EndNs   int64 `json:"end_ns"`
	// StartUncertaintyNs and EndUncertaintyNs are how long the transitions
	// may have taken place before the first airborne observation and
	// after the last one (0: exact or unknown, see Rule).
	StartUncertaintyNs int64 `json:"start_uncertainty_ns"`
	EndUncertaintyNs   int64 `json:"end_uncertainty_ns"`
	// Rule is "mavlink-armed", "field:<path>", "silence:<d>" or "range".
	Rule string `json:"rule"`
	// Open is set when the drone was still in flight at the last
	// telemetry the centre holds: EndNs is that observation.
	Open bool `json:"open,omitempty"`
}

// observation is one airborne/on-ground reading at an event time.
type observation struct {
	atNs     int64
	airborne bool
}

// detector finds flights from a drone's observations in order. It is a
// deterministic core: time comes only from the observations.
type detector struct {
	silence int64 // ns; > 0: the silence rule
	rule    string
	// lastGround is the last on-ground observation (0: none yet).
	lastGround int64
	// lastAir is the last airborne observation of the open flight.
	lastAir int64
	open    *Flight
	done    []Flight
}

func newDetector(rule string, silence time.Duration) *detector {
	return &detector{rule: rule, silence: int64(silence)}
}

func (d *detector) observe(o observation) {
	if d.silence > 0 && d.open != nil && o.atNs-d.lastAir > d.silence {
		d.close(d.lastAir, 0)
	}
	switch {
	case o.airborne && d.open == nil:
		f := &Flight{StartNs: o.atNs, Rule: d.rule}
		if d.lastGround != 0 && d.lastGround <= o.atNs {
			f.StartNs, f.StartUncertaintyNs = d.lastGround, o.atNs-d.lastGround
		}
		d.open, d.lastAir = f, o.atNs
	case o.airborne:
		d.lastAir = max(d.lastAir, o.atNs)
	case d.open != nil:
		d.close(o.atNs, o.atNs-d.lastAir)
		d.lastGround = o.atNs
	default:
		d.lastGround = o.atNs
	}
}

func (d *detector) close(endNs, uncertainty int64) {
	f := *d.open
	f.EndNs, f.EndUncertaintyNs = endNs, max(uncertainty, 0)
	d.done = append(d.done, f)
	d.open = nil
}

// flights returns the flights found, the open one last (Open set).
func (d *detector) flights() []Flight {
	out := append([]Flight(nil), d.done...)
	if d.open != nil {
		f := *d.open
		f.EndNs, f.Open = d.lastAir, true
		out = append(out, f)
	}
	return out
}

// jsonAirborne reads an MQTT drone's ArmedField from a JSON payload; ok is
// false when the payload is not JSON or has no such field.
func jsonAirborne(payload []byte, path string) (airborne, ok bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return false, false
	}
	for _, k := range strings.Split(path, ".") {
		m, isMap := v.(map[string]any)
		if !isMap {
			return false, false
		}
		if v, ok = m[k]; !ok {
			return false, false
		}
	}
	switch x := v.(type) {
	case bool:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return err == nil && f != 0, err == nil
	case string:
		switch strings.ToLower(x) {
		case "", "false", "0", "landed", "disarmed", "on_ground", "ground":
			return false, true
		}
		return true, true
	}
	return false, false
}
