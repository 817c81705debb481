package devices

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// State is the disk-pressure level.
type State int

const (
	// StateOK: free space is above RetainBelow; nothing is deleted early.
	StateOK State = iota
	// StateRetain: free space is below RetainBelow; replicated data is truncated.
	StateRetain
	// StateShed: free space is below ShedBelow; the policy sheds.
	StateShed
)

// String returns "ok", "retain" or "shed".
func (s State) String() string {
	switch s {
	case StateRetain:
		return "retain"
	case StateShed:
		return "shed"
	}
	return "ok"
}

// MarshalText implements encoding.TextMarshaler (JSON for /status).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// StreamPressureStats are one stream's disk-pressure counters.
type StreamPressureStats struct {
	// TruncatedEvents counts events deleted early by retention (replicated).
	TruncatedEvents uint64 `json:"truncated_events"`
	// ShedEvents and ShedBytes count events (payload bytes) dropped by shedding.
	ShedEvents uint64 `json:"shed_events"`
	ShedBytes  uint64 `json:"shed_bytes"`
	// ShedUnreplicated counts shed events that a sink had not committed.
	ShedUnreplicated uint64 `json:"shed_unreplicated"`
	// Sheds counts Shed calls; GapMarkers the gap markers written.
	Sheds      uint64 `json:"sheds"`
	GapMarkers uint64 `json:"gap_markers"`
	// MarkersCarried counts older, unreplicated gap markers that fell in a
	// shed range and were appended again (so no gap report is lost).
	MarkersCarried uint64 `json:"markers_carried"`
}

// PressureStats are the disk-pressure counters and gauges.
type PressureStats struct {
	// State is the level at the last check.
	State State `json:"state"`
	// FreeBytes and TotalBytes are the last measurement; RetainBelowBytes
	// and ShedBelowBytes the thresholds resolved against it.
	FreeBytes        int64 `json:"free_bytes"`
	TotalBytes       int64 `json:"total_bytes"`
	RetainBelowBytes int64 `json:"retain_below_bytes"`
	ShedBelowBytes   int64 `json:"shed_below_bytes"`
	// Checks counts checks; Errors failed steps (LastError the last one).
	Checks    uint64 `json:"checks"`
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// ReclaimedBytes is how much the store's files shrank across the
	// checks that deleted data (payload files are deleted with the data;
	// net of appends meanwhile). GCRuns counts reclaims after deletions
	// (localstream's Reclaim: memtable flush, flatten, value-log GC),
	// ReclaimWritten the bytes they wrote
	// (compactions, entries moved), ReclaimFiles the value-log files they
	// deleted, ReclaimSeconds their total time and LastReclaimSeconds the
	// last one's.
	GCRuns             uint64  `json:"gc_runs"`
	ReclaimedBytes     uint64  `json:"reclaimed_bytes"`
	ReclaimWritten     uint64  `json:"reclaim_written_bytes"`
	ReclaimFiles       uint64  `json:"reclaim_files"`
	LastReclaimSeconds float64 `json:"last_reclaim_seconds"`
	ReclaimSeconds     float64 `json:"reclaim_seconds"`
	// RetainSkipped counts streams whose sinks' committed cuts were not
	// ordered (no single cut at or before all of them): not truncated.
	RetainSkipped uint64 `json:"retain_skipped"`
	// PendingMarkers are gap markers the store refused (disk full), kept to
	// be appended once it accepts; MarkersLost those beyond the bound.
	PendingMarkers int    `json:"pending_markers"`
	MarkersLost    uint64 `json:"markers_lost"`
	// Streams holds the per-stream counters.
	Streams map[string]StreamPressureStats `json:"streams"`
}

// Pressure watches the free space of the store's filesystem and applies
// early retention and the shedding policy (see the package doc and
// docs/devices.md). Check and Run must not run concurrently; Stats
// and State are safe for concurrent use.
type Pressure struct {
	store *localstream.Store
	cfg   PressureConfig

	// mu guards stats and pending.
	mu      sync.Mutex
	stats   PressureStats
	pending []pendingMarker
	seq     uint64 // numbers pending markers' metadata keys

	// Used by Check only.
	unreclaimed bool      // retention deleted data not yet reclaimed
	lastReclaim time.Time // when Reclaim last ran
}

// retainReclaimEvery is the longest that space deleted by retention
// (above the shed level) waits for Reclaim.
const retainReclaimEvery = time.Minute

// NewPressure returns the disk-pressure handler of store. It starts nothing.
func NewPressure(store *localstream.Store, cfg PressureConfig) (*Pressure, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: disk pressure: no store", ErrConfig)
	}
	p := &Pressure{store: store, cfg: cfg.withDefaults(), stats: PressureStats{Streams: map[string]StreamPressureStats{}}}
	if err := p.loadMarkers(); err != nil {
		return nil, err
	}
	return p, nil
}

// Run checks every Interval until ctx ends, and returns nil then. Failed
// steps are counted and retried at the next check.
func (p *Pressure) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := p.Check(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Debug("devices: disk pressure check", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check measures free space once and acts on it: below RetainBelow every
// stream is truncated to its committed cut; below ShedBelow (measured
// again after retention and garbage collection) the first stream of the
// policy that may still lose data is shed by ShedFraction. It returns the
// state measured first.
func (p *Pressure) Check(ctx context.Context) (State, error) {
	var errs []error
	p.retryMarkers(ctx)
	state, err := p.measure(true)
	if err != nil {
		return state, p.fail(err)
	}
	if state == StateOK {
		return state, nil
	}
	usage := p.store.DiskUsage()
	defer func() {
		p.mu.Lock()
		p.stats.ReclaimedBytes += uint64(max(0, usage-p.store.DiskUsage()))
		p.mu.Unlock()
	}()
	for _, st := range p.store.Streams() {
		n, err := p.retain(st)
		errs = append(errs, err)
		p.unreclaimed = p.unreclaimed || n > 0
	}
	// Above the shed level, what retention deleted is reclaimed at most
	// every retainReclaimEvery: a reclaim flattens the LSM tree, and
	// retention deletes a little at every check.
	if p.unreclaimed && (state == StateShed || p.cfg.Now().Sub(p.lastReclaim) >= retainReclaimEvery) {
		errs = append(errs, p.gc(ctx))
	}
	if state == StateShed {
		again, err := p.measure(false)
		errs = append(errs, err)
		if err == nil && again == StateShed {
			shed, err := p.shedNext(ctx)
			errs = append(errs, err)
			if shed {
				errs = append(errs, p.gc(ctx))
				// Markers the store refused for want of room go in
				// now that the shed's space is reclaimed.
				p.retryMarkers(ctx)
			}
		}
	}
	return state, p.fail(errors.Join(errs...))
}

// measure reads the free space and records it; first marks the check's
// first measurement, which sets (and logs changes of) the state.
func (p *Pressure) measure(first bool) (State, error) {
	free, total, err := p.cfg.DiskSpace(p.store.Dir())
	if err != nil {
		return StateOK, fmt.Errorf("devices: free space of %s: %w", p.store.Dir(), err)
	}
	retainAt, shedAt := p.cfg.RetainBelow.Resolve(total), p.cfg.ShedBelow.Resolve(total)
	state := StateOK
	switch {
	case free < shedAt:
		state = StateShed
	case free < retainAt:
		state = StateRetain
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.FreeBytes, p.stats.TotalBytes = free, total
	if !first {
		return state, nil
	}
	if state != p.stats.State {
		p.cfg.Logger.Info("devices: disk pressure", "state", state.String(), "free_bytes", free, "total_bytes", total)
	}
	p.stats.Checks++
	p.stats.State = state
	p.stats.RetainBelowBytes, p.stats.ShedBelowBytes = retainAt, shedAt
	return state, nil
}

func (p *Pressure) fail(err error) error {
	if err == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Errors++
	p.stats.LastError = err.Error()
	return err
}

// gc gives the space of what retention and shedding deleted back to the
// filesystem (localstream's Reclaim).
func (p *Pressure) gc(ctx context.Context) error {
	res, err := p.store.Reclaim(ctx)
	p.unreclaimed, p.lastReclaim = err != nil, p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.GCRuns++
	p.stats.ReclaimFiles += uint64(res.Files)
	p.stats.ReclaimWritten += uint64(res.Written)
	p.stats.LastReclaimSeconds = res.Took.Seconds()
	p.stats.ReclaimSeconds += res.Took.Seconds()
	if err != nil {
		return fmt.Errorf("devices: reclaim: %w", err)
	}
	return nil
}

// State returns the level at the last check.
func (p *Pressure) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats.State
}

// Stats returns a copy of the counters.
func (p *Pressure) Stats() PressureStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Streams = maps.Clone(p.stats.Streams)
	s.PendingMarkers = len(p.pending)
	return s
}

// count updates one stream's counters.
func (p *Pressure) count(stream string, f func(*StreamPressureStats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats.Streams[stream]
	f(&s)
	p.stats.Streams[stream] = s
}
