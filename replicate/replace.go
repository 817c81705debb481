package replicate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// replace sends a marker in place of an event the centre cannot take
// (docs/design.md rule 13): the events around it flow on in the same
// transaction. Any other error of Add is returned.
func (r *Replicator) replace(ctx context.Context, txn Txn, rec localstream.Record, err error) error {
	if !errors.Is(err, ErrMessageTooLarge) {
		return err
	}
	if err := txn.AddMarker(ctx, rec, err.Error()); err != nil {
		return fmt.Errorf("replicate: marker for event %s: %w", rec.Position, err)
	}
	r.dropped.Add(1)
	// The agent's handler lets a repeating warning through at a bounded rate.
	r.cfg.Logger.Warn("event replaced by a marker at the centre", "stream", r.st.Name(),
		"position", rec.Position.String(), "writer", rec.Writer, "routing_key_bytes", len(rec.RoutingKey), "reason", err)
	return nil
}

// txnEvents is the most events the next transaction holds: the
// configured bound, lowered to the sink's own as known now (layout 1:
// below the server's max batch size, which a rejection may have lowered).
func (r *Replicator) txnEvents() int {
	if l, ok := r.sink.(txnEventLimiter); ok {
		return max(min(r.cfg.MaxTxnEvents, l.MaxTxnEvents()), 1)
	}
	return r.cfg.MaxTxnEvents
}

// failWarnEvery spaces the warnings of a stream that keeps failing.
const failWarnEvery = 30 * time.Second

// warnFailing logs, at most every failWarnEvery, that the stream has been
// failing since its first error after the last commit: no error class
// goes on silently (a stopped stream logs an error once).
func (r *Replicator) warnFailing(err error) {
	r.mu.Lock()
	since := r.failingSince
	r.mu.Unlock()
	now := r.cfg.Now()
	if since.IsZero() || now.Sub(since) < failWarnEvery || now.Sub(r.failWarned) < failWarnEvery {
		return
	}
	r.failWarned = now
	r.cfg.Logger.Warn("replication failing", "stream", r.st.Name(), "since", since.UTC().Format(time.RFC3339),
		"retries", r.retries.Load(), "err", err)
}
