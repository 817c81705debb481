package telemetry

import "time"

// reportInterval bounds the drop reports: the first refusal or drop is
// logged within a second, then at most one line per reportInterval, with
// the counts since the last line — never a line per message.
const reportInterval = 10 * time.Second

// dropCounts are the counters reportDrops watches.
type dropCounts struct {
	refused, oversize, unknownTopic, retained, mapped, laneFull uint64
}

func (in *Ingester) dropCounts() dropCounts {
	c := &in.c
	return dropCounts{
		refused: c.dronesOverLimit.Load(), oversize: c.oversize.Load(), unknownTopic: c.unknownTopic.Load(),
		retained: c.retained.Load(), mapped: c.droneIDsMapped.Load(), laneFull: c.laneFullWaits.Load(),
	}
}

// reportDrops logs refused, dropped and mapped messages while they happen
// (bounded as above), until the ingester stops.
func (in *Ingester) reportDrops() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last dropCounts
	var lastLog time.Time
	for stop := false; !stop; {
		select {
		case <-t.C:
		case <-in.stopping:
			stop = true // a last report of what the previous one missed
		}
		now := in.dropCounts()
		if now == last || (!stop && time.Since(lastLog) < reportInterval) {
			continue
		}
		in.cfg.Logger.Warn("telemetry: messages refused, dropped or mapped since the last report",
			"drones_refused", now.refused-last.refused, "max_drones", in.cfg.MaxDrones,
			"oversize_dropped", now.oversize-last.oversize, "unknown_topic_dropped", now.unknownTopic-last.unknownTopic,
			"retained_skipped", now.retained-last.retained, "drone_ids_mapped", now.mapped-last.mapped,
			"lane_full_waits", now.laneFull-last.laneFull)
		last, lastLog = now, time.Now()
	}
}
