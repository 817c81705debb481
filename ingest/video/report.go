package video

import "github.com/edge-agent/edge-agent/ingest/droplog"

// dropCounts are the counters reportDrops watches.
type dropCounts struct {
	notRTP, oversize, rejected, unverified, tooMany, evicted, unknownRTCP uint64
	queueDrops, malformed, framesTooLarge, framesDropped, appendErrors    uint64
}

func dropsOf(s Stats) dropCounts {
	return dropCounts{
		notRTP: s.NotRTP, oversize: s.Oversize, rejected: s.Rejected, unverified: s.Unverified,
		tooMany: s.TooManyDrones, evicted: s.Evicted, unknownRTCP: s.UnknownRTCP,
		queueDrops: s.QueueDrops, malformed: s.Malformed + s.MalformedPayload + s.MalformedRTCP,
		framesTooLarge: s.FramesTooLarge, framesDropped: s.FramesDropped, appendErrors: s.AppendErrors,
	}
}

// reportDrops logs dropped and refused input while it happens (droplog's
// bounds) until stop is closed, then once more if anything is unreported.
func (in *Ingest) reportDrops(stop <-chan struct{}) {
	droplog.Run(stop, func() dropCounts { return dropsOf(in.Stats()) }, func(now, last dropCounts) {
		in.log.Warn("video: datagrams or frames dropped since the last report",
			"not_rtp", now.notRTP-last.notRTP, "oversize", now.oversize-last.oversize,
			"rejected", now.rejected-last.rejected, "unverified", now.unverified-last.unverified,
			"too_many_drones", now.tooMany-last.tooMany, "drones_evicted", now.evicted-last.evicted,
			"unknown_rtcp", now.unknownRTCP-last.unknownRTCP, "queue_drops", now.queueDrops-last.queueDrops,
			"malformed", now.malformed-last.malformed, "frames_too_large", now.framesTooLarge-last.framesTooLarge,
			"frames_dropped", now.framesDropped-last.framesDropped, "append_errors", now.appendErrors-last.appendErrors)
	})
}
