package devices

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/shirou/gopsutil/v3/disk"
)

// ShedRule is one entry of the shedding policy.
type ShedRule struct {
	// Stream is the stream the rule is about.
	Stream string `yaml:"stream" json:"stream"`
	// AllowUnreplicated lets the shed level drop this stream's oldest
	// events although the central store has not committed them (an
	// explicit, counted loss, with gap markers). False (the default): the
	// stream only loses what is replicated, and when the disk reaches the
	// store's floor its new appends are refused instead.
	AllowUnreplicated bool `yaml:"allow_unreplicated" json:"allow_unreplicated"`
}

// PressureConfig configures disk-pressure handling. Zero fields take the
// defaults of NewDefaultPressureConfig.
type PressureConfig struct {
	// RetainBelow: when free space falls below it, every stream is
	// truncated to its committed cut (replicated data deleted early).
	// Default 20%.
	RetainBelow Threshold `yaml:"retain_below" json:"retain_below"`
	// ShedBelow: when free space is still below it after retention, the
	// policy's streams that allow it are shed oldest first. It must be
	// below RetainBelow and above the store's min_free_bytes (below which
	// appends are refused). Default 10%.
	ShedBelow Threshold `yaml:"shed_below" json:"shed_below"`
	// Interval is how often free space is checked. Default 5s.
	Interval time.Duration `yaml:"interval" json:"interval"`
	// Policy is the shedding order: the first rule's stream is shed until
	// it holds nothing more it may lose, then the next. Streams not listed
	// are never shed (only retained). Default: video, telemetry, health,
	// none allowing unreplicated loss.
	Policy []ShedRule `yaml:"policy" json:"policy"`
	// ShedFraction is the share of a stream's retained events dropped per
	// check (from its head). Default 0.1.
	ShedFraction float64 `yaml:"shed_fraction" json:"shed_fraction"`
	// MinShedEvents is the least number of events dropped per shed (small
	// streams). Default 16.
	MinShedEvents int `yaml:"min_shed_events" json:"min_shed_events"`
	// MaxPendingMarkers bounds the gap markers kept in memory while the
	// store refuses them (disk full); further ones are counted and lost.
	// Default 1024.
	MaxPendingMarkers int `yaml:"max_pending_markers" json:"max_pending_markers"`
	// DiskSpace reports the free and total bytes of the filesystem holding
	// dir. Default statfs through gopsutil; tests inject a filling disk.
	DiskSpace func(dir string) (free, total int64, err error) `yaml:"-" json:"-"`
	// Now is the clock (gap-marker ingest times, stats). Default time.Now.
	Now func() time.Time `yaml:"-" json:"-"`
	// Logger receives state changes and failures. Default slog.Default().
	Logger *slog.Logger `yaml:"-" json:"-"`
}

// ShedReason is the reason written in the gap markers of disk-pressure sheds.
const ShedReason = "disk_pressure"

// NewDefaultPressureConfig returns the defaults noted on each field of
// PressureConfig (the injected functions and the logger nil: statfs,
// time.Now, slog.Default()).
func NewDefaultPressureConfig() PressureConfig {
	return PressureConfig{
		RetainBelow:       Threshold{Percent: 20},
		ShedBelow:         Threshold{Percent: 10},
		Interval:          5 * time.Second,
		Policy:            []ShedRule{{Stream: "video"}, {Stream: "telemetry"}, {Stream: "health"}},
		ShedFraction:      0.1,
		MinShedEvents:     16,
		MaxPendingMarkers: 1024,
	}
}

// withDefaults fills the unset fields of c from NewDefaultPressureConfig.
func (c PressureConfig) withDefaults() PressureConfig {
	d := NewDefaultPressureConfig()
	if c.RetainBelow.IsZero() {
		c.RetainBelow = d.RetainBelow
	}
	if c.ShedBelow.IsZero() {
		c.ShedBelow = d.ShedBelow
	}
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.Policy == nil {
		c.Policy = d.Policy
	}
	if c.ShedFraction == 0 {
		c.ShedFraction = d.ShedFraction
	}
	if c.MinShedEvents == 0 {
		c.MinShedEvents = d.MinShedEvents
	}
	if c.MaxPendingMarkers == 0 {
		c.MaxPendingMarkers = d.MaxPendingMarkers
	}
	if c.DiskSpace == nil {
		c.DiskSpace = statDisk
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks the fields that are set; zero fields take defaults.
func (c PressureConfig) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: disk_pressure."+f, append([]any{ErrConfig}, a...)...)
	}
	r, s := c.withDefaults().RetainBelow, c.withDefaults().ShedBelow
	if r.Bytes < 0 || s.Bytes < 0 {
		return bad("retain_below/shed_below: negative size: use bytes such as 2GiB or a percentage such as 10%%")
	}
	if (r.Percent != 0) == (s.Percent != 0) && r.Resolve(100) <= s.Resolve(100) {
		return bad("shed_below %s must be below retain_below %s: shedding starts after early retention", s, r)
	}
	if c.Interval < 0 {
		return bad("interval %s is negative: use a duration such as 5s", c.Interval)
	}
	if c.ShedFraction < 0 || c.ShedFraction > 1 {
		return bad("shed_fraction %g: want a share in (0, 1], e.g. 0.1", c.ShedFraction)
	}
	if c.MinShedEvents < 0 || c.MaxPendingMarkers < 0 {
		return bad("min_shed_events/max_pending_markers must not be negative")
	}
	seen := map[string]bool{}
	for i, r := range c.Policy {
		if err := localstream.ValidateStreamName(r.Stream); err != nil {
			return bad("policy[%d].stream %q: %v", i, r.Stream, err)
		}
		if seen[r.Stream] {
			return bad("policy[%d].stream %q is listed twice: list each stream once, in shedding order", i, r.Stream)
		}
		seen[r.Stream] = true
	}
	return nil
}

// statDisk is the default DiskSpace: the space available to unprivileged
// users, as df shows it.
func statDisk(dir string) (free, total int64, err error) {
	u, err := disk.Usage(dir)
	if err != nil {
		return 0, 0, err
	}
	return int64(u.Free), int64(u.Total), nil
}
