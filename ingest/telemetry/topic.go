package telemetry

import (
	"fmt"
	"strings"
)

// Pattern is an MQTT topic filter with one named level, `{drone}`, that
// captures the drone id: `drones/{drone}/telemetry/#`. Other levels are
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

// ParsePattern checks and parses a pattern. It must contain {drone} exactly
// once as a whole level, and `#` only as its last level.
func ParsePattern(s string) (Pattern, error) {
	p := Pattern{raw: s, levels: strings.Split(s, "/"), droneAt: -1}
	if s == "" {
		return p, fmt.Errorf("%w: empty", ErrPattern)
	}
	for i, l := range p.levels {
		switch {
		case l == DroneVar:
			if p.droneAt >= 0 {
				return p, fmt.Errorf("%w: %q has %s twice", ErrPattern, s, DroneVar)
			}
			p.droneAt = i
		case l == "#":
			if i != len(p.levels)-1 {
				return p, fmt.Errorf("%w: %q: '#' must be the last level", ErrPattern, s)
			}
		case l == "+":
		case strings.ContainsAny(l, "+#{}"):
			return p, fmt.Errorf("%w: %q: level %q mixes wildcards or braces with text", ErrPattern, s, l)
		}
	}
	if p.droneAt < 0 {
		return p, fmt.Errorf("%w: %q has no %s level", ErrPattern, s, DroneVar)
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
