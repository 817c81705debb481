package agent

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/live"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/procs"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// Status is the JSON document served at /status.
type Status struct {
	// Agent is the agent id; Instance marks this run's commit records.
	Agent    string `json:"agent"`
	Instance string `json:"instance"`
	// Time is when this status was taken (the agent's clock).
	Time time.Time `json:"time"`
	// Uptime since Run started.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Central is the central URL in use, without credentials: the
	// connected server, else the configured ones ("" when disabled).
	Central string `json:"central"`
	// CentralConnected tells whether the connection to the centre is up
	// (the record /readyz and Uplink read: replicate.Outage).
	CentralConnected bool `json:"central_connected"`
	// Store holds store-wide counters (free space, queue, disk-full rejects).
	Store localstream.StoreStats `json:"store"`
	// Streams describes each local stream.
	Streams []StreamStatus `json:"streams"`
	// Video and Telemetry are the intake counters (nil when disabled).
	Video     *video.Stats     `json:"video,omitempty"`
	Telemetry *telemetry.Stats `json:"telemetry,omitempty"`
	// MAVLink is the MAVLink intake's counters, per drone too (nil when disabled).
	MAVLink *mavlink.Stats `json:"mavlink,omitempty"`
	// Live is the live lane (nil when off or without central).
	Live *live.Stats `json:"live,omitempty"`
	// Devices is the drone registry, host health and disk pressure.
	Devices any `json:"devices,omitempty"`
	// Procs is how `edge-agent run` sizes GOMAXPROCS (absent in a
	// process that does not: tests, the library).
	Procs *procs.Stats `json:"procs,omitempty"`
	// Uplink is the link to the centre: the cap's use on the wire, the
	// backlog, the outage and when the backlog will be complete at the
	// centre (nil without central).
	Uplink *UplinkStatus `json:"uplink,omitempty"`
	// Errors holds the latest error of each part that has one.
	Errors map[string]string `json:"errors"`
}

// StreamStatus describes one local stream.
type StreamStatus struct {
	Name     string                `json:"name"`
	Segments []localstream.Segment `json:"segments"`
	// Head and Tail are the first retained and the after-last durable cuts (text form).
	Head string `json:"head"`
	Tail string `json:"tail"`
	// Committed is the committed cut of each sink.
	Committed map[string]string `json:"committed"`
	// LocalWatermark is over durable positions; CommittedWatermark is the
	// one in the last commit record.
	LocalWatermark     watermark.Watermark  `json:"local_watermark"`
	CommittedWatermark *watermark.Watermark `json:"committed_watermark,omitempty"`
	// LocalLagSeconds and CommittedLagSeconds are how far each watermark's
	// lower bound is behind Status.Time (absent while there is none).
	LocalLagSeconds     *float64 `json:"local_lag_seconds,omitempty"`
	CommittedLagSeconds *float64 `json:"committed_lag_seconds,omitempty"`
	// Stats are the stream's append counters; Marks the tracker's.
	Stats localstream.StreamStats `json:"stats"`
	Marks watermark.Stats         `json:"marks"`
	// ClockSkew lists the writers with events outside the receiving
	// clock's bounds, with their counts and whether they are behind now
	// (not holding the watermark back).
	ClockSkew []watermark.WriterSkew `json:"clock_skew,omitempty"`
	// Replication is the replicator's state, lag and backlog (nil without central).
	Replication *replicate.StreamStats `json:"replication,omitempty"`
	// CatchUp is how far the backlog is behind in time and bytes and when
	// it catches up at the current uplink rate (nil without central).
	CatchUp *CatchUp `json:"catch_up,omitempty"`
}

// Status assembles the current status. Safe to call after Ready.
func (a *Agent) Status() Status {
	now := time.Now()
	// One snapshot of the one record of the centre's link for the whole
	// document: read twice, or from nats.go's own state beside it, the
	// parts could disagree (down in uplink, connected in
	// central_connected, no error).
	outage := a.outage.State()
	s := Status{Agent: a.id, Instance: a.instance, Time: now, UptimeSeconds: now.Sub(a.started).Seconds(),
		Central: a.CentralURL(), CentralConnected: a.centralConn() != nil && !outage.Down, Store: a.store.Stats(),
		Errors: map[string]string{}}
	a.mu.Lock()
	maps.Copy(s.Errors, a.errs)
	if s.Store.Failed != "" {
		s.Errors["store"] = s.Store.Failed + " (intake stopped: nothing more is acknowledged; the agent exits with status 1 for a restart)"
	}
	procsStats := a.procs
	a.mu.Unlock()
	if procsStats != nil {
		ps := procsStats()
		s.Procs = &ps
	}
	if a.centralConn() != nil && outage.Down {
		s.Errors["central"] = fmt.Sprintf("%s since %s (%s); not connected to %s (check central.url and that the server runs; capturing locally meanwhile)",
			outage.Cause, outage.Since.UTC().Format(time.RFC3339), now.Sub(outage.Since).Round(time.Second), s.Central)
	}
	repl := map[string]*replicate.StreamStats{}
	for _, rs := range a.replStats() {
		repl[rs.Stream] = &rs
		switch {
		case rs.LastError == "" || !rs.LastErrorEnded.IsZero(): // a past one stays in replication only
		case outage.Down:
			// The link's error, not the stream's: said once, in words.
			s.Errors["sync/"+rs.Stream] = outage.Cause + "; the backlog waits (" + replicate.ErrNotConnected.Error() + ")"
		case s.CentralConnected && rs.LastErrorDisconnected:
			// The centre is back: the outage's error is past.
		default:
			s.Errors["sync/"+rs.Stream] = rs.LastError
		}
		if p := rs.Problem(now, replicationStall); p != "" {
			s.Errors["sync/"+rs.Stream] = p
		}
		if rs.LastLoss != "" {
			s.Errors["sync/"+rs.Stream+"/lost"] = rs.LastLoss
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.streams)) {
		st := a.streams[name]
		topo := st.Topology()
		ss := StreamStatus{Name: name, Head: st.HeadCut().String(), Tail: topo.TailCut().String(),
			Committed: map[string]string{}, Stats: st.Stats(), Marks: a.trackers[name].Stats(), Replication: repl[name],
			ClockSkew: a.trackers[name].SkewedWriters()}
		for _, id := range slices.Sorted(maps.Keys(topo.Segments)) {
			ss.Segments = append(ss.Segments, topo.Segments[id])
		}
		if cuts, err := st.CommittedCuts(); err == nil {
			for sink, c := range cuts {
				ss.Committed[sink] = c.String()
			}
		}
		if w, err := a.trackers[name].Local(); err == nil {
			ss.LocalWatermark = w
		}
		if r := repl[name]; r != nil {
			ss.CatchUp = a.catchUp(r, now)
		}
		if r := repl[name]; r != nil && r.WatermarkLowerNs != 0 {
			ss.CommittedWatermark = &watermark.Watermark{LowerNs: r.WatermarkLowerNs, UpperNs: r.WatermarkUpperNs}
			ss.CommittedLagSeconds = lagSeconds(now, r.WatermarkLowerNs)
		}
		if ss.LocalWatermark.LowerNs > 0 {
			ss.LocalLagSeconds = lagSeconds(now, ss.LocalWatermark.LowerNs)
		}
		s.Streams = append(s.Streams, ss)
	}
	s.Uplink = a.uplinkStatus(now, outage, repl)
	if a.video != nil {
		v := a.video.Stats()
		s.Video = &v
		for _, src := range v.Sources {
			if src.State == video.SourceFailing {
				s.Errors["video/source/"+src.Drone] = fmt.Sprintf("%s failing since %s (%s ago): %s",
					src.URL, src.Since.UTC().Format(time.RFC3339), now.Sub(src.Since).Round(time.Second), src.LastError)
			}
		}
	}
	if a.telem != nil {
		t := a.telem.Stats()
		s.Telemetry = &t
	}
	if a.mavlink != nil {
		m := a.mavlink.Stats()
		s.MAVLink = &m
	}
	if a.lane != nil {
		l := a.lane.Stats()
		s.Live = &l
		for _, ls := range l.Streams {
			if p := laneProblem(ls, l.LastError, outage, now); p != "" {
				s.Errors["live/"+ls.Stream] = p
			}
		}
	}
	s.Devices = a.devices.status()
	return s
}

// laneProblem says why a stream's live lane does not deliver ("" when it
// does, or nothing waits): since when, how old its last value at the
// centre is, and the cause — the outage's, else the lane's last error.
func laneProblem(ls live.StreamStats, laneErr string, o replicate.OutageState, now time.Time) string {
	if ls.NotDeliveringSince.IsZero() {
		return ""
	}
	last := "nothing sent yet"
	if !ls.LastSent.IsZero() {
		last = "last value sent " + now.Sub(ls.LastSent).Round(100*time.Millisecond).String() + " ago"
	}
	cause := laneErr
	if o.Down {
		cause = o.Cause
	}
	p := fmt.Sprintf("not delivering since %s (%s; %s)", ls.NotDeliveringSince.UTC().Format(time.RFC3339),
		now.Sub(ls.NotDeliveringSince).Round(time.Second), last)
	if cause != "" {
		p += ": " + cause
	}
	return p
}

// lagSeconds is how far the time lowerNs is behind now.
func lagSeconds(now time.Time, lowerNs int64) *float64 {
	l := now.Sub(time.Unix(0, lowerNs)).Seconds()
	return &l
}

// replStats are the streams' replication snapshots (none without central).
func (a *Agent) replStats() []replicate.StreamStats {
	if a.repl == nil {
		return nil
	}
	return a.repl.Stats()
}
