package live

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// StreamConfig configures the live lane of one local stream.
type StreamConfig struct {
	// Enabled sends the stream's latest value per drone. Default: on for
	// telemetry and health, off for video and any other stream.
	Enabled *bool `yaml:"enabled"`
	// Interval is the least time between two values of one drone. Default
	// 1 s for telemetry, 5 s for health, 10 s for video, 1 s otherwise.
	Interval time.Duration `yaml:"interval"`
	// Keyframes takes only the latest keyframe of each drone (a video
	// chunk's keyframe access unit with its parameter sets), not its
	// latest event. Default: on for video.
	Keyframes *bool `yaml:"keyframes"`
}

// On reports whether the stream's lane is enabled.
func (c StreamConfig) On() bool { return c.Enabled != nil && *c.Enabled }

// KeyframesOnly reports whether only keyframes are sent.
func (c StreamConfig) KeyframesOnly() bool { return c.Keyframes != nil && *c.Keyframes }

// Config configures the live lane. NewDefaultConfig holds every default.
type Config struct {
	// Enabled turns the whole lane on. Default true (with a central URL).
	Enabled bool `yaml:"enabled"`
	// Share is the part of the uplink cap (central.uplink_bytes_per_sec)
	// the lane may use, in (0, 1]; the backlog gets the rest and whatever
	// the lane leaves unused. Without a cap the lane is bounded by its
	// intervals alone. Default 0.1.
	Share float64 `yaml:"share"`
	// TTL is how long the centre keeps a drone's last value (Nats-TTL):
	// a drone gone longer than that drops out of the preview. Default 1 h.
	TTL time.Duration `yaml:"ttl"`
	// MaxDrones bounds the drones tracked per stream; when all are
	// taken, a new drone takes the slot of one with no event for a
	// minute, else its values are dropped and counted
	// (Stats.DronesRefused). Default 1,024.
	MaxDrones int `yaml:"max_drones"`
	// MaxValueBytes bounds one value's payload; a larger one is not sent
	// and is counted (Stats.TooLarge). Default 256 KiB.
	MaxValueBytes int `yaml:"max_value_bytes"`
	// Seed is how many of the last events of each open segment are read
	// at start, so that the lane has values before new events arrive.
	// Default 64.
	Seed int `yaml:"seed"`
	// Replicas of the EDGELIVE stream when the lane creates it. Default
	// (0): the agent's central.replicas; 1 in the library.
	Replicas int `yaml:"replicas"`
	// Streams configures the lane per local stream name.
	Streams map[string]StreamConfig `yaml:"streams"`
}

// NewDefaultConfig returns the defaults: on, a tenth of the cap,
// telemetry every second and health every 5 s, video off (its latest
// keyframe every 10 s when turned on).
func NewDefaultConfig() Config {
	return Config{Enabled: true, Share: 0.1, TTL: time.Hour, MaxDrones: 1024, MaxValueBytes: 256 << 10,
		Seed: 64, Streams: map[string]StreamConfig{
			"telemetry": DefaultStreamConfig("telemetry"),
			"health":    DefaultStreamConfig("health"),
			"video":     DefaultStreamConfig("video"),
		}}
}

// DefaultStreamConfig is the default lane of a stream named name.
func DefaultStreamConfig(name string) StreamConfig {
	on, kf := true, false
	iv := time.Second
	switch name {
	case "health":
		iv = 5 * time.Second
	case "video":
		on, kf, iv = false, true, 10*time.Second
	case "telemetry":
	default:
		on = false
	}
	return StreamConfig{Enabled: &on, Interval: iv, Keyframes: &kf}
}

// Stream returns the effective configuration of the stream named name:
// what is set in Streams, the rest from DefaultStreamConfig.
func (c Config) Stream(name string) StreamConfig {
	d := DefaultStreamConfig(name)
	s, ok := c.Streams[name]
	if !ok {
		return d
	}
	if s.Enabled == nil {
		s.Enabled = d.Enabled
	}
	if s.Interval <= 0 {
		s.Interval = d.Interval
	}
	if s.Keyframes == nil {
		s.Keyframes = d.Keyframes
	}
	return s
}

// withDefaults fills zero fields from NewDefaultConfig.
func (c Config) withDefaults() Config {
	d := NewDefaultConfig()
	if c.Share == 0 {
		c.Share = d.Share
	}
	if c.TTL == 0 {
		c.TTL = d.TTL
	}
	if c.MaxDrones == 0 {
		c.MaxDrones = d.MaxDrones
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = d.MaxValueBytes
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c
}

// Validate checks the configuration; the error names the field.
func (c Config) Validate() error {
	switch {
	case c.Share < 0 || c.Share > 1:
		return fmt.Errorf("%w: live.share %g is outside (0, 1]: the part of central.uplink_bytes_per_sec the lane may use", ErrConfig, c.Share)
	case c.TTL < 0 || c.TTL > 0 && c.TTL < time.Second:
		return fmt.Errorf("%w: live.ttl %v: set at least 1s (the centre's TTL granularity)", ErrConfig, c.TTL)
	case c.MaxDrones < 0:
		return fmt.Errorf("%w: live.max_drones %d is negative", ErrConfig, c.MaxDrones)
	case c.MaxValueBytes < 0:
		return fmt.Errorf("%w: live.max_value_bytes %d is negative", ErrConfig, c.MaxValueBytes)
	case c.Seed < 0:
		return fmt.Errorf("%w: live.seed %d is negative", ErrConfig, c.Seed)
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("%w: live.replicas %d: want 1 to 5", ErrConfig, c.Replicas)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Streams)) {
		if iv := c.Streams[name].Interval; iv < 0 || iv > 0 && iv < 100*time.Millisecond {
			return fmt.Errorf("%w: live.streams.%s.interval %v: set at least 100ms", ErrConfig, name, iv)
		}
	}
	return nil
}
