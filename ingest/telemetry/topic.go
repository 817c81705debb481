package telemetry

import (
	"fmt"
	"strings"
)

// Pattern is an MQTT topic filter with one level that captures the drone
// id: `drones/{drone}/telemetry/#`, or `drones/+/telemetry/#` where the
// single `+` is the drone level. Other levels are
// literals, `+` (any one level) or a final `#` (any rest, including none).
type Pattern struct {
	// raw is the pattern as configured.
	raw string
	// levels are its '/'-separated levels.
	levels []string
	// droneAt is the index of the {drone} level.
	droneAt int
}

// DroneVar is the level of a pattern that names the drone.
const DroneVar = "{drone}"

// ParsePattern checks and parses a pattern. The drone level is the one
// {drone} level or, without one, the single `+` level (`drones/+/telemetry`,
// the filter every MQTT user types); other `+` levels match any one level.
// `#` may only be the last level. Errors are *PatternError.
func ParsePattern(s string) (Pattern, error) {
	p := Pattern{raw: s, levels: strings.Split(s, "/"), droneAt: -1}
	bad := func(format string, args ...any) (Pattern, error) {
		return p, &PatternError{Pattern: s, Reason: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return bad("empty")
	}
	plus := -1
	plusCount := 0
	for i, l := range p.levels {
		switch {
		case l == DroneVar:
			if p.droneAt >= 0 {
				return bad("%s twice", DroneVar)
			}
			p.droneAt = i
		case l == "#":
			if i != len(p.levels)-1 {
				return bad("'#' must be the last level")
			}
		case l == "+":
			plus = i
			plusCount++
		case strings.ContainsAny(l, "+#{}"):
			return bad("level %q mixes wildcards or braces with text", l)
		}
	}
	if p.droneAt < 0 {
		switch plusCount {
		case 0:
			return bad("no drone level: mark it with %s or a single + (e.g. drones/+/telemetry)", DroneVar)
		case 1:
			p.droneAt = plus
		default:
			return bad("several + levels: mark the drone level with %s", DroneVar)
		}
	}
	return p, nil
}

// String returns the pattern as configured.
func (p Pattern) String() string { return p.raw }

// Filter is the MQTT subscription filter: {drone} becomes `+`.
func (p Pattern) Filter() string {
	out := make([]string, len(p.levels))
	copy(out, p.levels)
	out[p.droneAt] = "+"
	return strings.Join(out, "/")
}

// Match reports whether topic matches and returns the drone id.
func (p Pattern) Match(topic string) (drone string, ok bool) {
	// Topics starting with '$' are never matched by wildcards (MQTT 4.7.2).
	if strings.HasPrefix(topic, "$") {
		return "", false
	}
	i := 0
	for li, l := range p.levels {
		if l == "#" {
			return drone, drone != ""
		}
		if i > len(topic) {
			return "", false
		}
		j := strings.IndexByte(topic[i:], '/')
		var level string
		if j < 0 {
			level, j = topic[i:], len(topic)
		} else {
			level, j = topic[i:i+j], i+j
		}
		switch {
		case li == p.droneAt:
			if level == "" {
				return "", false
			}
			drone = level
		case l == "+":
		case l != level:
			return "", false
		}
		i = j + 1
	}
	if i <= len(topic) {
		return "", false // topic has more levels than the pattern
	}
	return drone, true
}
