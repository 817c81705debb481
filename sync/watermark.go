package sync

import (
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// TrackerWatermark adapts a stream's watermark.Tracker to the replicator.
func TrackerWatermark(t *watermark.Tracker) CommittedWatermarkFunc {
	return func(cut localstream.StreamCut) (Watermark, error) {
		w, err := t.CommittedAt(cut)
		return Watermark(w), err
	}
}
