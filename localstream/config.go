package localstream

import (
	"fmt"
	"time"
)

// ScaleType selects a scaling policy.
type ScaleType string

const (
	// ScaleFixed keeps MinSegments segments; only manual scaling changes them.
	ScaleFixed ScaleType = "fixed"
	// ScaleByEventRate splits a segment above TargetRate events/s and merges
	// neighbours below TargetRate/Factor.
	ScaleByEventRate ScaleType = "by_event_rate"
	// ScaleByDataRate is ScaleByEventRate with TargetRate in bytes/s.
	ScaleByDataRate ScaleType = "by_data_rate"
)

// ScalingPolicy configures a stream's segments. Defaults suit an edge box
// where drones come and go: a 10 s window and a 30 s cool-down (Pravega's
// are minutes).
type ScalingPolicy struct {
	// Type is ScaleFixed unless set.
	Type ScaleType `yaml:"type" json:"type"`
	// MinSegments is the initial and minimum number of segments. Default 1.
	MinSegments int `yaml:"min_segments" json:"min_segments"`
	// TargetRate is events/s (by_event_rate) or bytes/s (by_data_rate) per segment.
	TargetRate float64 `yaml:"target_rate" json:"target_rate"`
	// Factor is how many parts a hot segment splits into. Default 2.
	Factor int `yaml:"factor" json:"factor"`
	// Window is the rate measuring window. Default 10s.
	Window time.Duration `yaml:"window" json:"window"`
	// Cooldown is the minimum time between two scales of the stream. Default 30s.
	Cooldown time.Duration `yaml:"cooldown" json:"cooldown"`
	// MaxSegments bounds auto-scaling. Default 64.
	MaxSegments int `yaml:"max_segments" json:"max_segments"`
}

// StreamConfig configures a stream at creation.
type StreamConfig struct {
	// Scaling is the stream's scaling policy.
	Scaling ScalingPolicy `yaml:"scaling" json:"scaling"`
}

func (p ScalingPolicy) withDefaults() ScalingPolicy {
	if p.Type == "" {
		p.Type = ScaleFixed
	}
	if p.MinSegments <= 0 {
		p.MinSegments = 1
	}
	if p.Factor < 2 {
		p.Factor = 2
	}
	if p.Window <= 0 {
		p.Window = 10 * time.Second
	}
	if p.Cooldown <= 0 {
		p.Cooldown = 30 * time.Second
	}
	if p.MaxSegments <= 0 {
		p.MaxSegments = 64
	}
	return p
}

// Validate reports the first invalid field, naming the fix.
func (p ScalingPolicy) Validate() error {
	switch p.Type {
	case "", ScaleFixed:
	case ScaleByEventRate, ScaleByDataRate:
		if p.TargetRate <= 0 {
			return fmt.Errorf("localstream: scaling.target_rate must be > 0 for %s", p.Type)
		}
	default:
		return fmt.Errorf("localstream: scaling.type %q: want fixed, by_event_rate or by_data_rate", p.Type)
	}
	if p.MinSegments < 0 || p.MinSegments > 1024 {
		return fmt.Errorf("localstream: scaling.min_segments %d: want 1..1024", p.MinSegments)
	}
	if p.MaxSegments != 0 && p.MaxSegments < p.MinSegments {
		return fmt.Errorf("localstream: scaling.max_segments %d below min_segments %d", p.MaxSegments, p.MinSegments)
	}
	return nil
}
