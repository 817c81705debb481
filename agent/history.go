package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// History bounds: one sample a second, the last 10 minutes.
const (
	historyEvery = time.Second
	historyLen   = 600
)

// streamSample is one stream's numbers at one instant; nil is unknown.
type streamSample struct {
	committedLag, localLag *float64
	backlogEvents          *float64
	backlogBytes           *float64
	replicatedBytes        *float64
}

// history keeps the last historyLen samples of every stream's watermark
// lags, replication backlog and replicated bytes, so that the status page
// shows the last minutes as soon as it opens. It is a ring: memory is
// bounded by historyLen × streams. Safe for concurrent use.
type history struct {
	mu    sync.Mutex
	times []float64                 // Unix seconds, ring order from start
	rows  []map[string]streamSample // per sample: stream → numbers
	start int                       // index of the oldest sample once full
}

// add appends a sample, dropping the oldest beyond historyLen.
func (h *history) add(t time.Time, row map[string]streamSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := float64(t.UnixNano()) / 1e9
	if len(h.times) < historyLen {
		h.times = append(h.times, ts)
		h.rows = append(h.rows, row)
		return
	}
	h.times[h.start], h.rows[h.start] = ts, row
	h.start = (h.start + 1) % historyLen
}

// HistoryDoc is the JSON document at /status/history: columns of equal
// length, oldest first; null where a value was unknown.
type HistoryDoc struct {
	// Time is each sample's time in Unix seconds.
	Time []float64 `json:"time"`
	// Streams holds each stream's columns by name.
	Streams map[string]*HistoryColumns `json:"streams"`
}

// HistoryColumns are one stream's sampled values.
type HistoryColumns struct {
	CommittedLagSeconds []*float64 `json:"committed_lag_seconds"`
	LocalLagSeconds     []*float64 `json:"local_lag_seconds"`
	BacklogEvents       []*float64 `json:"backlog_events"`
	// BacklogBytes is the backlog's estimated payload bytes.
	BacklogBytes []*float64 `json:"backlog_bytes"`
	// ReplicatedBytes is the replicator's byte counter (the page turns it into a rate).
	ReplicatedBytes []*float64 `json:"replicated_bytes"`
}

// doc returns the samples in time order.
func (h *history) doc() HistoryDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.times)
	d := HistoryDoc{Time: make([]float64, 0, n), Streams: map[string]*HistoryColumns{}}
	for i := range n {
		j := (h.start + i) % n
		d.Time = append(d.Time, h.times[j])
		for name, s := range h.rows[j] {
			c := d.Streams[name]
			if c == nil {
				c = &HistoryColumns{}
				// A stream first seen late has nulls before.
				for range i {
					c.append(streamSample{})
				}
				d.Streams[name] = c
			}
			c.append(s)
		}
		for name, c := range d.Streams {
			if _, ok := h.rows[j][name]; !ok {
				c.append(streamSample{})
			}
		}
	}
	return d
}

func (c *HistoryColumns) append(s streamSample) {
	c.CommittedLagSeconds = append(c.CommittedLagSeconds, s.committedLag)
	c.LocalLagSeconds = append(c.LocalLagSeconds, s.localLag)
	c.BacklogEvents = append(c.BacklogEvents, s.backlogEvents)
	c.BacklogBytes = append(c.BacklogBytes, s.backlogBytes)
	c.ReplicatedBytes = append(c.ReplicatedBytes, s.replicatedBytes)
}

// sampleHistory records a sample every historyEvery until ctx ends, the
// first one historyEvery after the sample Run takes before it is ready.
func (a *Agent) sampleHistory(ctx context.Context) error {
	t := time.NewTicker(historyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		a.sampleOnce()
	}
}

// sampleOnce records one history sample and marks the agent alive.
func (a *Agent) sampleOnce() {
	a.history.add(time.Now(), a.streamSamples())
	a.lastSample.Store(time.Now().UnixNano()) // Alive
	if a.uplink != nil {
		a.wire.add(time.Now(), a.uplink.Sent())
	}
}

// streamSamples reads each stream's lags, backlog and replicated bytes,
// the same numbers /status shows.
func (a *Agent) streamSamples() map[string]streamSample {
	now := time.Now()
	row := make(map[string]streamSample, len(a.streams))
	for name, tr := range a.trackers {
		var s streamSample
		if w, err := tr.Local(); err == nil && w.LowerNs > 0 {
			s.localLag = lagSeconds(now, w.LowerNs)
		}
		row[name] = s
	}
	for _, rs := range a.replStats() {
		s := row[rs.Stream]
		if rs.WatermarkLowerNs != 0 {
			s.committedLag = lagSeconds(now, rs.WatermarkLowerNs)
		}
		backlog, backlogBytes, bytes := float64(rs.BacklogEvents), float64(rs.BacklogBytes), float64(rs.Bytes)
		s.backlogEvents, s.backlogBytes, s.replicatedBytes = &backlog, &backlogBytes, &bytes
		row[rs.Stream] = s
	}
	return row
}

// serveHistory answers /status/history.
func (a *Agent) serveHistory(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(a.history.doc())
}
