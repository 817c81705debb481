package sync

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metricsCollector exports Replication.Stats as Prometheus metrics, read
// at scrape time (no per-message work).
type metricsCollector struct {
	r *Replication

	txns, events, bytes, retries, conflicts, fenced *prometheus.Desc
	dropped                                         *prometheus.Desc
	lag, backlogEvents, backlogBytes, wmLower, up   *prometheus.Desc
}

// Collectors returns the replication's Prometheus collectors (metrics
// edge_sync_*, label stream).
func (r *Replication) Collectors() []prometheus.Collector {
	l := []string{"stream"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc("edge_sync_"+name, help, l, nil) }
	return []prometheus.Collector{&metricsCollector{
		r:             r,
		txns:          d("txns_committed_total", "Transactions committed to the central store by this run."),
		events:        d("events_committed_total", "Events committed to the central store by this run."),
		bytes:         d("bytes_committed_total", "Payload bytes committed to the central store by this run."),
		retries:       d("retries_total", "Resumes from the central cut after an error."),
		conflicts:     d("conflicts_total", "Commits rejected by the fencing expectation."),
		dropped:       d("events_dropped_total", "Events replaced at the centre by a marker (too large for the central max payload)."),
		fenced:        d("stopped", "1 when the stream's replication stopped on a permanent error (fenced, misconfigured, ...)."),
		lag:           d("event_time_lag_seconds", "Now minus the committed watermark's lower bound."),
		backlogEvents: d("backlog_events", "Local events after the committed cut."),
		backlogBytes:  d("backlog_bytes", "Payload bytes after the committed cut (estimated)."),
		wmLower:       d("committed_watermark_lower_seconds", "The committed watermark's lower bound, Unix seconds."),
		up:            d("replicating", "1 while the stream replicates without error."),
	}}
}

func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.txns, c.events, c.bytes, c.retries, c.conflicts, c.dropped, c.fenced, c.lag, c.backlogEvents, c.backlogBytes, c.wmLower, c.up} {
		ch <- d
	}
}

func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, s := range c.r.Stats() {
		m := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(d, t, v, s.Stream)
		}
		m(c.txns, prometheus.CounterValue, float64(s.Txns))
		m(c.events, prometheus.CounterValue, float64(s.Events))
		m(c.bytes, prometheus.CounterValue, float64(s.Bytes))
		m(c.retries, prometheus.CounterValue, float64(s.Retries))
		m(c.conflicts, prometheus.CounterValue, float64(s.Conflicts))
		m(c.dropped, prometheus.CounterValue, float64(s.Dropped))
		m(c.fenced, prometheus.GaugeValue, b2f(s.Stopped != ""))
		m(c.lag, prometheus.GaugeValue, s.EventTimeLag.Seconds())
		m(c.backlogEvents, prometheus.GaugeValue, float64(s.BacklogEvents))
		m(c.backlogBytes, prometheus.GaugeValue, float64(s.BacklogBytes))
		m(c.wmLower, prometheus.GaugeValue, float64(s.WatermarkLowerNs)/1e9)
		m(c.up, prometheus.GaugeValue, b2f(s.State == StateReplicating))
	}
}
