package replicate

import (
	"errors"
	"fmt"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// TrackerWatermark adapts a stream's watermark.Tracker to the replicator.
// A tracker error must not stop replication, nor move the centre's
// watermark back: any error is passed on as watermark.ErrCutRegressed, on
// which the replicator repeats the watermark of its last commit (computed
// for a cut within the new one, so still true). Errors other than
// ErrCutRegressed itself go to onErr first (nil: ignored), for the log and
// /status.
func TrackerWatermark(t *watermark.Tracker, onErr func(error)) CommittedWatermarkFunc {
	return func(cut localstream.StreamCut) (watermark.Watermark, error) {
		w, err := t.CommittedAt(cut)
		if err == nil || errors.Is(err, watermark.ErrCutRegressed) {
			return w, err
		}
		if onErr != nil {
			onErr(err)
		}
		return watermark.Watermark{}, fmt.Errorf("%w: %w", watermark.ErrCutRegressed, err)
	}
}

// CommittedWatermarkFunc returns the committed watermark for a cut about to
// be committed: it must use only writer marks inside cut (rule 5).
type CommittedWatermarkFunc func(cut localstream.StreamCut) (watermark.Watermark, error)
