package devices

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// HealthConfig configures a Sampler. The zero value of a field gives the
// default noted on it; Agent and DataDir are required.
type HealthConfig struct {
	// Agent is the agent id: the routing key of health events and the
	// writer "health/<agent>". Required.
	Agent string `yaml:"-" json:"-"`
	// DataDir is the directory whose filesystem's usage is sampled. Required.
	DataDir string `yaml:"-" json:"-"`
	// Interval is the sampling period. Default 10s.
	Interval time.Duration `yaml:"interval" json:"interval"`
	// Interfaces limits the network interfaces sampled; empty: every
	// interface but loopback.
	Interfaces []string `yaml:"interfaces" json:"interfaces"`
	// Now is the clock that stamps samples. Default time.Now.
	Now func() time.Time `yaml:"-" json:"-"`
	// Logger receives rare events. Default slog.Default().
	Logger *slog.Logger `yaml:"-" json:"-"`
}

// HealthWriter is the writer id of the health events of agent.
func HealthWriter(agent string) string { return "health/" + agent }

// Validate checks the configuration.
func (c HealthConfig) Validate() error {
	switch {
	case c.Agent == "":
		return fmt.Errorf("%w: health: agent id is empty: set agent_id", ErrConfig)
	case c.DataDir == "":
		return fmt.Errorf("%w: health: data directory is empty: set data_dir", ErrConfig)
	case c.Interval < 0:
		return fmt.Errorf("%w: health.interval %s is negative: use a duration such as 10s", ErrConfig, c.Interval)
	}
	return nil
}

// NewDefaultHealthConfig returns the defaults noted on each field of
// HealthConfig (Agent and DataDir are required, Now and Logger nil: time.Now,
// slog.Default()).
func NewDefaultHealthConfig() HealthConfig {
	return HealthConfig{Interval: 10 * time.Second}
}

// withDefaults fills the unset fields of c from NewDefaultHealthConfig.
func (c HealthConfig) withDefaults() HealthConfig {
	if c.Interval == 0 {
		c.Interval = NewDefaultHealthConfig().Interval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// SamplerStats are the sampler's counters.
type SamplerStats struct {
	// Samples counts samples appended durably.
	Samples uint64 `json:"samples"`
	// AppendErrors counts samples the store refused (e.g. disk full): dropped.
	// Per-reason drops are not kept: the store's own counters have them.
	AppendErrors uint64 `json:"append_errors"`
	// ProbeErrors counts probes that failed inside samples (listed in Sample.Errors).
	ProbeErrors uint64 `json:"probe_errors"`
	// MarkErrors counts watermark notes that failed.
	MarkErrors uint64 `json:"mark_errors"`
}

// Sampler samples the host's health every interval and appends each sample
// to the health stream, then notes a watermark mark. Latest and Stats are
// safe for concurrent use with Run; Run must be called once.
type Sampler struct {
	cfg   HealthConfig
	out   Appender
	marks Marks // may be nil
	probe probe

	// mu guards latest.
	mu     sync.Mutex
	latest *Sample

	samples, appendErrors, probeErrors, markErrors atomic.Uint64
}

// NewSampler returns a sampler appending to out (the health stream) and
// noting marks in marks (nil, or a nil pointer: no marks). It starts nothing.
func NewSampler(cfg HealthConfig, out Appender, marks Marks) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("%w: health: no stream to append to", ErrConfig)
	}
	if v := reflect.ValueOf(marks); marks != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		marks = nil // a nil *Tracker in the interface: no marks, not a panic
	}
	cfg = cfg.withDefaults()
	s := &Sampler{cfg: cfg, out: out, marks: marks, probe: probe{dir: cfg.DataDir}}
	if len(cfg.Interfaces) > 0 {
		s.probe.interfaces = map[string]bool{}
		for _, n := range cfg.Interfaces {
			s.probe.interfaces[n] = true
		}
	}
	return s, nil
}

// Run samples at once and then every Interval until ctx ends; it returns
// nil then. A sample the store refuses is dropped and counted: health is
// never a reason to stop the agent.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.SampleOnce(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Debug("devices: health sample dropped", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SampleOnce takes one sample, appends it and notes its mark. It returns
// the sample's position. Not safe for concurrent use with itself or Run.
func (s *Sampler) SampleOnce(ctx context.Context) (localstream.Position, error) {
	now := s.cfg.Now()
	smp := s.probe.sample(ctx, s.cfg.Agent, now)
	s.probeErrors.Add(uint64(len(smp.Errors)))
	s.mu.Lock()
	s.latest = &smp
	s.mu.Unlock()
	payload, err := json.Marshal(smp)
	if err != nil {
		return localstream.Position{}, err
	}
	writer := HealthWriter(s.cfg.Agent)
	ev := localstream.Event{RoutingKey: s.cfg.Agent, Writer: writer, EventTime: now.UnixNano(),
		IngestTime: now.UnixNano(), ContentType: "application/json", Payload: payload}
	var adm watermark.Admission
	if s.marks != nil {
		adm = s.marks.Admit(writer, ev.EventTime, ev.IngestTime)
		ev.Flags |= adm.Flags()
	}
	pos, err := s.out.Append(ctx, ev)
	if err != nil {
		if ctx.Err() == nil { // a cancelled sample at shutdown is no drop
			s.appendErrors.Add(1)
		}
		return pos, fmt.Errorf("devices: health sample: %w", err)
	}
	s.samples.Add(1)
	if s.marks != nil {
		if err := s.marks.NoteAdmitted(writer, adm, ev.EventTime, pos); err != nil {
			s.markErrors.Add(1)
		}
	}
	return pos, nil
}

// Latest returns the last sample taken (appended or not), for /status.
func (s *Sampler) Latest() (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest == nil {
		return Sample{}, false
	}
	return *s.latest, true
}

// Stats returns the sampler's counters.
func (s *Sampler) Stats() SamplerStats {
	return SamplerStats{Samples: s.samples.Load(), AppendErrors: s.appendErrors.Load(),
		ProbeErrors: s.probeErrors.Load(), MarkErrors: s.markErrors.Load()}
}
