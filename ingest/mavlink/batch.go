package mavlink

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// Appender is what the intake appends to: the telemetry stream
// (*localstream.Stream), or a wrapper of it that forwards groups.
type Appender interface {
	// AppendGroupAsync queues the events as one group, in order (one store
	// commit), and calls cb once when all are durable, in append order
	// with the other groups; it keeps nothing of evs after it returns.
	// opts (localstream.WithMeta: the signing timestamps) are written with
	// the group's first event.
	AppendGroupAsync(ctx context.Context, evs []localstream.Event, cb func([]localstream.Position, error), opts ...localstream.AppendOption) error
}

// A MAVLink link owes its sender no acknowledgement, so the intake need
// not commit each frame as it comes: the events of the frames taken
// within Config.BatchWindow (or until Config.BatchFrames) are appended as
// one group, one store commit and one WAL sync for all of them instead
// of one every few frames. At 20 drones × 50 frames/s that is 10 commits
// a second instead of ~50, and no allocation per frame on the intake's
// side (BenchmarkMAVLinkIntake). A frame waits at most BatchWindow more
// before it is durable; frames taken but not yet appended when the
// process is killed are lost as the socket's buffer would be, and the
// next run flags each component's first frame a discontinuity.
//
// batch is the group being collected. Intake.mu guards it.
type batch struct {
	evs   []localstream.Event
	notes []note
	hdrs  []localstream.Header // the events' headers, one array for all
	raw   []byte               // the events' payloads, one array for all
}

// note is what the store's callback needs of one event of a group.
type note struct {
	d   *drone
	adm watermark.Admission
	t   int64 // event time (the mark's)
}

// compIDText are the mavlink-compid header values.
var compIDText = func() (t [256]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return
}()

// add puts f's event into the batch, arming the flush timer for a new
// batch and flushing a full one. in.mu is held.
func (in *Intake) add(d *drone, f *Frame, evTime, recv, tlogUs int64, flags localstream.Flags, adm watermark.Admission) {
	b := &in.batch
	if len(b.evs) == 0 && in.cfg.BatchWindow > 0 {
		in.flushTimer.Reset(in.cfg.BatchWindow)
	}
	h := len(b.hdrs)
	b.hdrs = append(b.hdrs, localstream.Header{Key: HeaderMsgID, Value: f.info.idText},
		localstream.Header{Key: HeaderCompID, Value: compIDText[f.CompID]})
	if tlogUs != 0 {
		b.hdrs = append(b.hdrs, localstream.Header{Key: HeaderTlogTime, Value: strconv.FormatInt(tlogUs, 10)})
	}
	r := len(b.raw)
	b.raw = append(b.raw, f.Raw...)
	b.evs = append(b.evs, localstream.Event{RoutingKey: d.id, Writer: d.writer, EventTime: evTime, IngestTime: recv,
		Flags: flags, ContentType: ContentType, Headers: b.hdrs[h:len(b.hdrs):len(b.hdrs)], Payload: b.raw[r:len(b.raw):len(b.raw)]})
	b.notes = append(b.notes, note{d: d, adm: adm, t: evTime})
	d.pending.Add(1)
	if len(b.evs) >= in.cfg.BatchFrames {
		in.flush()
	}
}

// flush appends the batch as one group. in.mu is held: groups reach the
// store's queue in the order their frames were taken.
func (in *Intake) flush() {
	b := &in.batch
	if len(b.evs) == 0 {
		return
	}
	notes := b.notes
	metas, signed := in.replay.metas()
	in.inflight.Add(1)
	err := in.sink.Stream.AppendGroupAsync(in.ctx, b.evs, func(pos []localstream.Position, err error) {
		in.appended(notes, pos, err)
	}, metas...)
	// The store copied the events: their arrays serve the next batch.
	clear(b.evs) // no references kept to drones' strings
	b.evs, b.hdrs, b.raw = b.evs[:0], b.hdrs[:0], b.raw[:0]
	b.notes = make([]note, 0, cap(notes))
	if err == nil {
		return
	}
	in.inflight.Done()
	in.replay.unwritten(signed)
	for _, n := range notes {
		n.d.pending.Add(-1)
		n.d.discontinue = true // the next stored event of the drone says it
	}
	switch {
	case errors.Is(err, localstream.ErrDiskFull):
		in.c.diskFullDrops.Add(uint64(len(notes)))
	case in.ctx.Err() != nil:
	default:
		in.c.storeDrops.Add(uint64(len(notes)))
		in.fail(err)
	}
}

// appended is the store's callback for a group, in append order.
func (in *Intake) appended(notes []note, pos []localstream.Position, err error) {
	defer in.inflight.Done()
	// Not in.mu: the frame goroutine may hold it while it waits for room
	// in the store's queue, which this callback makes.
	for i, n := range notes {
		n.d.pending.Add(-1)
		if err != nil {
			continue
		}
		n.d.stored.Add(1)
		if in.sink.Marks != nil {
			if err := in.sink.Marks.NoteAdmitted(n.d.writer, n.adm, n.t, pos[i]); err != nil {
				in.c.markErrors.Add(1)
			}
		}
	}
	if err != nil {
		in.fail(err)
		return
	}
	in.c.stored.Add(uint64(len(notes)))
}

// flushLoop appends the batch when its window ends, until stop is closed.
func (in *Intake) flushLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-in.flushTimer.C:
			in.mu.Lock()
			in.flush()
			in.mu.Unlock()
		}
	}
}

// newFlushTimer is a stopped timer.
func newFlushTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}
