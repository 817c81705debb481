package telemetry

import "github.com/edge-agent/edge-agent/ingest/droplog"

// dropCounts are the counters reportDrops watches.
type dropCounts struct {
	refused, oversize, unknownTopic, retained, mapped, laneFull uint64
	connsRefused, connsSourceRefused, connsEvicted              uint64
}

func (in *Ingester) dropCounts() dropCounts {
	c := &in.c
	d := dropCounts{
		refused: c.dronesOverLimit.Load(), oversize: c.oversize.Load(), unknownTopic: c.unknownTopic.Load(),
		retained: c.retained.Load(), mapped: c.droneIDsMapped.Load(), laneFull: c.laneFullWaits.Load(),
	}
	if in.listener != nil {
		ls := in.listener.Stats()
		d.connsRefused, d.connsSourceRefused, d.connsEvicted = ls.Refused, ls.SourceRefused, ls.UnconnectedEvicted
	}
	return d
}

// reportDrops logs refused, dropped and mapped messages while they happen
// (droplog's bounds) until the ingester stops.
func (in *Ingester) reportDrops() {
	droplog.Run(in.stopping, in.dropCounts, func(now, last dropCounts) {
		in.cfg.Logger.Warn("telemetry: messages refused, dropped or mapped since the last report",
			"drones_refused", now.refused-last.refused, "max_drones", in.cfg.MaxDrones,
			"oversize_dropped", now.oversize-last.oversize, "unknown_topic_dropped", now.unknownTopic-last.unknownTopic,
			"retained_skipped", now.retained-last.retained, "drone_ids_mapped", now.mapped-last.mapped,
			"lane_full_waits", now.laneFull-last.laneFull,
			"listener_refused", now.connsRefused-last.connsRefused, "listener_source_refused", now.connsSourceRefused-last.connsSourceRefused,
			"listener_unconnected_evicted", now.connsEvicted-last.connsEvicted)
	})
}
