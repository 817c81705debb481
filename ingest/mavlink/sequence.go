package mavlink

import (
	"time"

	"github.com/edge-agent/edge-agent/ingest/sequence"
	"github.com/edge-agent/edge-agent/localstream"
)

// seqWindow is how many of a component's newest sequence numbers the
// intake remembers (a quarter of MAVLink's 8-bit space): a copy of any of
// them is a duplicate, dropped, and a frame behind the newest that was
// not seen fills its hole (reordered, not lost). A hole is counted lost
// once it leaves the window, or once it has waited holeWait.
const seqWindow = 64

// holeWait is how long a hole waits for its frame before it is counted
// lost, for a component that does not send the seqWindow frames that
// would decide it (a slow one, or one that went quiet after a loss).
const holeWait = 100 * time.Millisecond

// seqConfig is the shared window's shape for MAVLink: 8-bit numbers; a
// frame's checksum as its tag, so that a number seen again with other
// bytes is the component's numbering restarted (a reboot), not a copy.
var seqConfig = sequence.Config{Bits: 8, Window: seqWindow, Tags: true}

// seqTrack is a component's sequence state.
type seqTrack struct {
	w *sequence.Window // nil before the component's first frame in this run
	// holeSince is the receive time when the oldest pending hole opened.
	holeSince int64
	// listed: the component is in Intake.holes.
	listed bool
}

// holeRef names a component with holes pending (Intake.holes).
type holeRef struct {
	d    *drone
	comp uint8
}

// noteSeq classifies f's sequence number in its component: drop is a
// duplicate (counted); flags says a discontinuity. Lost frames are
// counted here, as the window decides them. The frame path calls it
// only when the window's TakeNext did not take the number (the common
// case, inlined there). in.mu is held.
func (in *Intake) noteSeq(d *drone, f *Frame, recv int64) (drop bool, flags localstream.Flags) {
	t := &d.comps[f.CompID].seq
	if t.w == nil {
		t.w = sequence.MustNew(seqConfig)
	}
	pending := t.w.Pending()
	r := t.w.Observe(uint32(f.Seq), uint32(f.CRC))
	if r.Kind == sequence.Next && r.Lost == 0 && t.w.Pending() == pending {
		return false, 0 // no hole opened, filled or lost
	}
	return in.seqOutcome(d, t, f.CompID, r, pending, recv)
}

// seqOutcome is noteSeq's result for an arrival other than the next
// number: it counts what was lost and lists the component while it has
// holes. in.mu is held.
func (in *Intake) seqOutcome(d *drone, t *seqTrack, comp uint8, r sequence.Result, pending int, recv int64) (drop bool, flags localstream.Flags) {
	in.countLost(d, r.Lost)
	if t.w.Pending() > pending {
		if pending == 0 {
			t.holeSince = recv
		}
		if !t.listed {
			t.listed = true
			if len(in.holes) == 0 {
				in.holeTimer.Reset(holeWait)
			}
			in.holes = append(in.holes, holeRef{d: d, comp: comp})
		}
	}
	switch r.Kind {
	case sequence.Duplicate:
		d.st.Duplicates++
		in.c.duplicates.Add(1)
		return true, 0
	case sequence.Next, sequence.Reordered:
		return false, 0
	default:
		// First: what came before is unknown. Ahead: frames skipped (a gap
		// before this one in the store). Restart: a new numbering. Late: a
		// frame whose loss was already counted, stored out of order.
		return false, localstream.FlagDiscontinuity
	}
}

func (in *Intake) countLost(d *drone, n int) {
	if n > 0 {
		d.st.Lost += uint64(n)
		in.c.lost.Add(uint64(n))
	}
}

// expireHoles counts lost the holes that waited holeWait. in.mu is held.
func (in *Intake) expireHoles(now int64) {
	keep := in.holes[:0]
	for _, h := range in.holes {
		t := &h.d.comps[h.comp].seq
		switch {
		case t.w.Pending() == 0:
			t.listed = false
		case now-t.holeSince >= int64(holeWait):
			in.countLost(h.d, t.w.Flush())
			t.listed = false
		default:
			keep = append(keep, h)
		}
	}
	clear(in.holes[len(keep):])
	in.holes = keep
}

// holeLoop expires holes when holeTimer fires (armed while there are
// holes: no wakeups without loss), until stop is closed.
func (in *Intake) holeLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-in.holeTimer.C:
			in.mu.Lock()
			in.expireHoles(in.cfg.Now().UnixNano())
			if len(in.holes) > 0 {
				in.holeTimer.Reset(holeWait / 2)
			}
			in.mu.Unlock()
		}
	}
}
