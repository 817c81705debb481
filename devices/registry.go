package devices

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Offline reasons reported by Drone.OfflineReason and OnOffline.
const (
	// OfflineExplicit: a status message or last will said offline (SetOnline false).
	OfflineExplicit = "explicit"
	// OfflineSilence: nothing was seen for RegistryConfig.OfflineAfter.
	OfflineSilence = "silence"
)

// RegistryConfig configures a Registry. The zero value gives the defaults
// noted on each field.
type RegistryConfig struct {
	// OfflineAfter is the silence after which a drone counts as offline.
	// Default 30s.
	OfflineAfter time.Duration `yaml:"offline_after" json:"offline_after"`
	// MaxDrones bounds the registry. When full, the offline drone seen
	// least recently is forgotten; if every drone is online, the new one is
	// not registered and counted in Stats.DronesRejected. Default 1024.
	MaxDrones int `yaml:"max_drones" json:"max_drones"`
	// MaxSources bounds the sources kept per drone; further sources are
	// counted in Drone.SourcesDropped. Default 32.
	MaxSources int `yaml:"max_sources" json:"max_sources"`
	// CheckInterval is how often Run looks for silent drones. Default
	// OfflineAfter/4, at least 100ms.
	CheckInterval time.Duration `yaml:"check_interval" json:"check_interval"`
	// Now is the clock used by Check and Run. Default time.Now.
	Now func() time.Time `yaml:"-" json:"-"`
	// OnOffline, when set, is called once per online→offline transition,
	// after the registry's lock is released, on the goroutine that caused
	// it (SetOnline, Check or Run). It must not block for long; it may call
	// the registry. The agent uses it to close the drone's watermark writers.
	OnOffline func(drone, reason string) `yaml:"-" json:"-"`
	// OnOnline, when set, is called once per offline→online transition
	// (and for a new drone), like OnOffline.
	OnOnline func(drone string) `yaml:"-" json:"-"`
}

// NewDefaultRegistryConfig returns the defaults noted on each field of
// RegistryConfig (CheckInterval 0: derived from OfflineAfter).
func NewDefaultRegistryConfig() RegistryConfig {
	return RegistryConfig{OfflineAfter: 30 * time.Second, MaxDrones: 1024, MaxSources: 32}
}

// withDefaults fills the unset fields of c from NewDefaultRegistryConfig.
func (c RegistryConfig) withDefaults() RegistryConfig {
	d := NewDefaultRegistryConfig()
	if c.OfflineAfter == 0 {
		c.OfflineAfter = d.OfflineAfter
	}
	if c.MaxDrones == 0 {
		c.MaxDrones = d.MaxDrones
	}
	if c.MaxSources == 0 {
		c.MaxSources = d.MaxSources
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = max(c.OfflineAfter/4, 100*time.Millisecond)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks the fields that are set; zero fields take defaults.
func (c RegistryConfig) Validate() error {
	if c.OfflineAfter < 0 {
		return fmt.Errorf("%w: devices.offline_after %s is negative: use a duration such as 30s", ErrConfig, c.OfflineAfter)
	}
	if c.MaxDrones < 0 {
		return fmt.Errorf("%w: devices.max_drones %d is negative: use a positive count or 0 for the default 1024", ErrConfig, c.MaxDrones)
	}
	if c.MaxSources < 0 {
		return fmt.Errorf("%w: devices.max_sources %d is negative: use a positive count or 0 for the default 32", ErrConfig, c.MaxSources)
	}
	return nil
}

// Source is one way a drone was seen: an RTP SSRC/address, an MQTT topic.
type Source struct {
	// ID names the source, e.g. "rtp:ssrc=1a2b3c4d" or "mqtt:drones/d1/telemetry".
	ID string `json:"id"`
	// FirstSeen and LastSeen are when it was first and last seen.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Events and Bytes count what it delivered.
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
}

// Drone is a snapshot of one drone's entry.
type Drone struct {
	// ID is the drone id (the routing key of its events).
	ID string `json:"id"`
	// FirstSeen and LastSeen are the first and last activity.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Online is the current state; OfflineReason says why it is offline
	// (OfflineExplicit or OfflineSilence), empty when online.
	Online        bool   `json:"online"`
	OfflineReason string `json:"offline_reason,omitempty"`
	// Since is when the drone entered its current state.
	Since time.Time `json:"since"`
	// Sources are the sources it was seen on, by id.
	Sources []Source `json:"sources"`
	// SourcesDropped counts sightings of sources beyond MaxSources.
	SourcesDropped uint64 `json:"sources_dropped,omitempty"`
	// Events and Bytes count everything seen.
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
	// Drops counts dropped input by reason (e.g. "oversize", "disk_full").
	Drops map[string]uint64 `json:"drops,omitempty"`
	// Transitions counts online/offline changes.
	Transitions uint64 `json:"transitions"`
}

// RegistryStats are registry-wide counters.
type RegistryStats struct {
	// Drones is the number of drones known; Online of those online.
	Drones int `json:"drones"`
	Online int `json:"online"`
	// DronesRejected counts sightings not registered because the registry was full.
	DronesRejected uint64 `json:"drones_rejected"`
	// DronesEvicted counts offline drones forgotten to make room.
	DronesEvicted uint64 `json:"drones_evicted"`
	// OfflineExplicit and OfflineSilence count online→offline
	// transitions by reason: a status message or last will, or silence
	// for offline_after.
	OfflineExplicit uint64 `json:"offline_explicit"`
	OfflineSilence  uint64 `json:"offline_silence"`
}

// drone is a registry entry. Registry.mu guards it.
type drone struct {
	Drone
	sources map[string]*Source
}

// Registry is the set of drones seen by any source, with their state and
// counters. It is safe for concurrent use. Time is passed in by the callers
// of Seen and SetOnline (the time of the sighting); Check compares it with
// the injected clock to find silent drones.
type Registry struct {
	cfg RegistryConfig

	// mu guards drones.
	mu     sync.Mutex
	drones map[string]*drone

	rejected, evicted, offExplicit, offSilence atomic.Uint64
}

// NewRegistry returns an empty registry. It starts nothing; call Run (or
// Check periodically) to detect silence.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Registry{cfg: cfg.withDefaults(), drones: map[string]*drone{}}, nil
}

// transition is a callback to run after the lock is released.
type transition struct {
	drone, reason string
	online        bool
}

func (r *Registry) fire(ts []transition) {
	for _, t := range ts {
		switch {
		case t.online && r.cfg.OnOnline != nil:
			r.cfg.OnOnline(t.drone)
		case !t.online && r.cfg.OnOffline != nil:
			r.cfg.OnOffline(t.drone, t.reason)
		}
	}
}

// entry returns the drone's entry, creating it (online) when new; nil when
// the registry is full of online drones. Lock should be held.
func (r *Registry) entry(id string, now time.Time, ts *[]transition) *drone {
	if d, ok := r.drones[id]; ok {
		return d
	}
	if len(r.drones) >= r.cfg.MaxDrones && !r.evictLocked() {
		r.rejected.Add(1)
		return nil
	}
	d := &drone{Drone: Drone{ID: id, FirstSeen: now, LastSeen: now, Online: true, Since: now}, sources: map[string]*Source{}}
	r.drones[id] = d
	*ts = append(*ts, transition{drone: id, online: true})
	return d
}

// evictLocked forgets the offline drone seen least recently. Lock should be held.
func (r *Registry) evictLocked() bool {
	var victim *drone
	for _, d := range r.drones {
		if !d.Online && (victim == nil || d.LastSeen.Before(victim.LastSeen)) {
			victim = d
		}
	}
	if victim == nil {
		return false
	}
	delete(r.drones, victim.ID)
	r.evicted.Add(1)
	return true
}

// setOnlineLocked changes the state. Lock should be held.
func (r *Registry) setOnlineLocked(d *drone, online bool, reason string, now time.Time, ts *[]transition) {
	if d.Online == online {
		return
	}
	d.Online = online
	d.Since = now
	d.Transitions++
	if online {
		d.OfflineReason = ""
	} else {
		d.OfflineReason = reason
		if reason == OfflineSilence {
			r.offSilence.Add(1)
		} else {
			r.offExplicit.Add(1)
		}
	}
	*ts = append(*ts, transition{drone: d.ID, online: online, reason: reason})
}

// Seen records activity of drone on source (see SourceRTP, SourceMQTT)
// carrying bytes at time now. A drone seen is online, whatever it said
// before. An empty source counts the activity without a source entry.
func (r *Registry) Seen(droneID, source string, bytes int, now time.Time) {
	r.seen(droneID, []byte(source), bytes, now)
}

// seen is Seen with the source's id as bytes: a known source is found
// without building its string.
func (r *Registry) seen(droneID string, source []byte, bytes int, now time.Time) {
	var ts []transition
	r.mu.Lock()
	d := r.entry(droneID, now, &ts)
	if d != nil {
		if now.After(d.LastSeen) {
			d.LastSeen = now
		}
		d.Events++
		d.Bytes += uint64(max(bytes, 0))
		r.setOnlineLocked(d, true, "", now, &ts)
		if len(source) > 0 {
			s, ok := d.sources[string(source)] // no allocation for the lookup
			switch {
			case ok:
			case len(d.sources) < r.cfg.MaxSources:
				id := string(source)
				s = &Source{ID: id, FirstSeen: now}
				d.sources[id] = s
			default:
				d.SourcesDropped++
			}
			if s != nil {
				if now.After(s.LastSeen) {
					s.LastSeen = now
				}
				s.Events++
				s.Bytes += uint64(max(bytes, 0))
			}
		}
	}
	r.mu.Unlock()
	r.fire(ts)
}

// SetOnline records an explicit state from the drone (a telemetry status
// message, an MQTT last will) at time now. An unknown drone is registered.
func (r *Registry) SetOnline(droneID string, online bool, now time.Time) {
	var ts []transition
	r.mu.Lock()
	if d := r.entry(droneID, now, &ts); d != nil {
		if online && now.After(d.LastSeen) {
			d.LastSeen = now
		}
		r.setOnlineLocked(d, online, OfflineExplicit, now, &ts)
	}
	r.mu.Unlock()
	r.fire(ts)
}

// Drop counts one dropped input of the drone by reason (an unknown drone is
// not registered by a drop, the drop is then not counted per drone).
func (r *Registry) Drop(droneID, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.drones[droneID]
	if !ok {
		return
	}
	if d.Drops == nil {
		d.Drops = map[string]uint64{}
	}
	d.Drops[reason]++
}

// Check marks offline every online drone silent for OfflineAfter at the
// injected clock's time, and returns how many it marked.
func (r *Registry) Check() int {
	now := r.cfg.Now()
	var ts []transition
	r.mu.Lock()
	for _, d := range r.drones {
		if d.Online && now.Sub(d.LastSeen) >= r.cfg.OfflineAfter {
			r.setOnlineLocked(d, false, OfflineSilence, now, &ts)
		}
	}
	r.mu.Unlock()
	r.fire(ts)
	return len(ts)
}

// Run calls Check every CheckInterval until ctx ends, and returns nil.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Check()
		}
	}
}

// Snapshot returns every drone, by id. The result is a copy.
func (r *Registry) Snapshot() []Drone {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Drone, 0, len(r.drones))
	for _, d := range r.drones {
		out = append(out, d.snapshot())
	}
	slices.SortFunc(out, func(a, b Drone) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Get returns one drone's snapshot.
func (r *Registry) Get(droneID string) (Drone, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.drones[droneID]
	if !ok {
		return Drone{}, false
	}
	return d.snapshot(), true
}

// snapshot copies the entry. Registry lock should be held.
func (d *drone) snapshot() Drone {
	s := d.Drone
	s.Drops = maps.Clone(d.Drops)
	s.Sources = make([]Source, 0, len(d.sources))
	for _, src := range d.sources {
		s.Sources = append(s.Sources, *src)
	}
	slices.SortFunc(s.Sources, func(a, b Source) int { return cmp.Compare(a.ID, b.ID) })
	return s
}

// Stats returns registry-wide counters.
func (r *Registry) Stats() RegistryStats {
	r.mu.Lock()
	st := RegistryStats{Drones: len(r.drones)}
	for _, d := range r.drones {
		if d.Online {
			st.Online++
		}
	}
	r.mu.Unlock()
	st.DronesRejected = r.rejected.Load()
	st.DronesEvicted = r.evicted.Load()
	st.OfflineExplicit = r.offExplicit.Load()
	st.OfflineSilence = r.offSilence.Load()
	return st
}
