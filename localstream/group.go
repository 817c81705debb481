package localstream

import (
	"context"
	"fmt"
)

// AppendGroupAsync queues evs, in order, as one group: the committer
// takes them into one batch (one commit, so one WAL sync in
// DurabilityAlways, while the group is within MaxBatchBytes), and cb is
// called once, on the store's callback goroutine in append order, with
// their positions when all are durable, or with the error. For an intake
// that owes no sender an acknowledgement per event and collects them for
// a while (MAVLink): a group of n costs the committer what one append
// does, not n. Nothing of evs is kept: the caller may reuse their memory
// once it returns. Like AppendAsync it blocks only while the queue is
// full or until ctx ends, and rejects an invalid event (then nothing of
// the group is written); the free-space admission is the group's whole
// size. A group holds at most MaxBatchEvents events and MaxBatchBytes
// bytes (ErrInvalidEvent beyond). opts apply to the group's first event:
// WithMeta's keys are then written in the transaction of the first event
// (or before it), so that no event of the group is durable without them.
// Safe for concurrent use.
func (st *Stream) AppendGroupAsync(ctx context.Context, evs []Event, cb func([]Position, error), opts ...AppendOption) error {
	if len(evs) == 0 {
		cb(nil, nil)
		return nil
	}
	if len(evs) > st.s.opts.MaxBatchEvents {
		return fmt.Errorf("%w: a group of %d events > %d", ErrInvalidEvent, len(evs), st.s.opts.MaxBatchEvents)
	}
	reqs := make([]appendReq, len(evs))
	group := make([]*appendReq, len(evs)-1)
	total := 0
	for i := range evs {
		var o []AppendOption
		if i == 0 {
			o = opts
		}
		size, err := st.prepare(&reqs[i], &evs[i], o)
		if err != nil {
			return fmt.Errorf("%w (event %d of the group)", err, i)
		}
		total += size
		if i > 0 {
			group[i-1] = &reqs[i]
		}
	}
	if total > st.s.opts.MaxBatchBytes {
		return fmt.Errorf("%w: a group of %d bytes > %d", ErrInvalidEvent, total, st.s.opts.MaxBatchBytes)
	}
	if err := st.s.admit(total); err != nil {
		return err
	}
	last := &reqs[len(reqs)-1]
	last.groupCB, last.groupN = cb, len(evs)
	reqs[0].group = group
	return st.s.enqueue(ctx, &reqs[0])
}

// done calls r's callback: AppendAsync's with r's position pos[i], or,
// on a group's last append, AppendGroupAsync's with the group's positions.
func (r *appendReq) done(pos []Position, i int, err error) {
	switch {
	case r.cb != nil && err != nil:
		r.cb(Position{}, err)
	case r.cb != nil:
		r.cb(pos[i], nil)
	case r.groupCB != nil && err != nil:
		r.groupCB(nil, err)
	case r.groupCB != nil:
		r.groupCB(pos[i+1-r.groupN:i+1], nil)
	}
}
