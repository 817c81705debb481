package video

import (
	"time"

	"github.com/pion/rtp"
)

// reorderWindow is the ring size of the reorder buffer: a packet more than
// this many sequence numbers ahead is a jump, not a reordering.
const reorderWindow = 512

// maxMisorder is how far behind a packet may be and still count as late
// (RFC 3550 A.1 MAX_MISORDER); further behind, it is a possible restart.
const maxMisorder = 100

// reorder puts the packets of one SSRC back in sequence-number order (16-bit
// wrap). It holds at most maxPackets packets, and a packet waits at most
// maxWait for the gap before it to fill; then the gap is declared lost.
// A jump of more than the window in either direction is taken as a restart
// of the sender's numbering once two consecutive packets confirm it
// (RFC 3550 A.1).
type reorder struct {
	maxPackets int
	maxWait    time.Duration
	c          *droneCounters

	started bool
	// warm: the first packets are held until warmPackets arrived or maxWait
	// passed, so that a reordered start is not taken for late packets.
	warm   bool
	next   uint16 // next sequence number to deliver
	count  int    // packets buffered
	badSeq int32  // expected next seq of a suspected restart, -1 if none
	// gapSince is when the oldest buffered packet arrived.
	gapSince time.Time
	slots    [reorderWindow]reorderSlot
	// delivered[s%window] = s+1 when s was delivered (0 = unknown), to tell
	// duplicates from packets that came after their gap was given up.
	delivered [reorderWindow]uint32
	// dropped is how many packets the drone's queue dropped right before
	// the one pushed next (afterDrops): a jump ahead they explain is a
	// loss, not a restart of the numbering.
	dropped int
}

// afterDrops says that the queue dropped n packets before the next push.
func (r *reorder) afterDrops(n int) { r.dropped = n }

type reorderSlot struct {
	ok      bool
	pkt     rtp.Packet
	arrival time.Time
}

// deliverFunc receives packets in order; lost is how many sequence numbers
// were skipped just before this packet.
type deliverFunc func(p *rtp.Packet, arrival time.Time, lost int)

func newReorder(maxPackets int, maxWait time.Duration, c *droneCounters) *reorder {
	if maxPackets >= reorderWindow {
		maxPackets = reorderWindow - 1
	}
	return &reorder{maxPackets: maxPackets, maxWait: maxWait, c: c, badSeq: -1}
}

// push adds one packet and delivers whatever is now in order.
func (r *reorder) push(p *rtp.Packet, arrival time.Time, out deliverFunc) {
	s := p.SequenceNumber
	dropped := r.dropped
	r.dropped = 0
	if !r.started {
		r.started, r.warm, r.next, r.gapSince = true, true, s, arrival
	}
	if r.warm {
		r.warmUp(p, arrival, out)
		return
	}
	d := int16(s - r.next)
	switch {
	case d == 0:
		r.badSeq = -1
		r.deliver(p, arrival, 0, out)
		r.drain(out)
	case d < 0 && d >= -maxMisorder:
		if r.delivered[s%reorderWindow] == uint32(s)+1 {
			r.c.duplicates.Add(1)
		} else {
			r.c.late.Add(1)
		}
	case (d < 0 || int(d) >= reorderWindow) && int(uint16(s-r.next)) <= dropped+maxMisorder:
		// The queue dropped what lies between: lost, not a restart.
		r.badSeq = -1
		r.flushAll(out)
		lost := int(uint16(s - r.next))
		r.c.lost.Add(uint64(lost))
		r.next = s
		r.deliver(p, arrival, lost, out)
		r.drain(out)
	case d < 0 || int(d) >= reorderWindow:
		if r.badSeq != int32(s) {
			// One packet far off: wait for a second to confirm a restart.
			r.badSeq = int32(s + 1)
			r.c.late.Add(1)
			return
		}
		r.badSeq = -1
		r.c.seqJumps.Add(1)
		r.flushAll(out)
		r.next = s
		r.deliver(p, arrival, 1, out) // a jump is a discontinuity
		r.drain(out)
	default:
		r.badSeq = -1
		sl := &r.slots[s%reorderWindow]
		if sl.ok {
			r.c.duplicates.Add(1)
			return
		}
		if r.count == 0 || arrival.Before(r.gapSince) {
			r.gapSince = arrival
		}
		sl.ok, sl.pkt, sl.arrival = true, *p, arrival
		r.count++
		r.c.reordered.Add(1)
		if r.count > r.maxPackets {
			r.skipGap(out)
		}
	}
}

// warmPackets is how many packets are held at the start of a session.
const warmPackets = 8

// warmUp holds the first packets of a session, moving the start back to
// the lowest sequence number seen.
func (r *reorder) warmUp(p *rtp.Packet, arrival time.Time, out deliverFunc) {
	s := p.SequenceNumber
	d := int16(s - r.next)
	if d < 0 && d >= -maxMisorder {
		r.next, d = s, 0
	}
	if d < 0 || int(d) >= reorderWindow-maxMisorder {
		r.c.late.Add(1)
		return
	}
	sl := &r.slots[s%reorderWindow]
	if sl.ok {
		r.c.duplicates.Add(1)
		return
	}
	sl.ok, sl.pkt, sl.arrival = true, *p, arrival
	r.count++
	if r.count >= warmPackets || r.count > r.maxPackets {
		r.endWarm(out)
	}
}

// endWarm starts delivering after the warm-up.
func (r *reorder) endWarm(out deliverFunc) {
	r.warm = false
	r.drain(out)
	if r.count > 0 {
		r.resetGapSince()
	}
}

// expire declares lost the gap that the oldest buffered packet has waited
// for longer than maxWait, and delivers what follows it.
func (r *reorder) expire(now time.Time, out deliverFunc) {
	if r.warm && now.Sub(r.gapSince) >= r.maxWait {
		r.endWarm(out)
	}
	for r.count > 0 && now.Sub(r.gapSince) >= r.maxWait {
		r.skipGap(out)
	}
}

// flushAll delivers every buffered packet in order, declaring the gaps lost.
func (r *reorder) flushAll(out deliverFunc) {
	r.warm = false
	for r.count > 0 {
		r.skipGap(out)
	}
}

// skipGap gives up the gap before the first buffered packet.
func (r *reorder) skipGap(out deliverFunc) {
	lost := 0
	for !r.slots[r.next%reorderWindow].ok {
		r.next++
		lost++
	}
	r.c.lost.Add(uint64(lost))
	sl := &r.slots[r.next%reorderWindow]
	p, a := sl.pkt, sl.arrival
	*sl = reorderSlot{}
	r.count--
	r.deliver(&p, a, lost, out)
	r.drain(out)
	r.resetGapSince()
}

// drain delivers consecutive buffered packets.
func (r *reorder) drain(out deliverFunc) {
	for r.count > 0 {
		sl := &r.slots[r.next%reorderWindow]
		if !sl.ok {
			return
		}
		p, a := sl.pkt, sl.arrival
		*sl = reorderSlot{}
		r.count--
		r.deliver(&p, a, 0, out)
	}
}

func (r *reorder) deliver(p *rtp.Packet, arrival time.Time, lost int, out deliverFunc) {
	r.delivered[p.SequenceNumber%reorderWindow] = uint32(p.SequenceNumber) + 1
	r.next = p.SequenceNumber + 1
	out(p, arrival, lost)
}

// resetGapSince recomputes the oldest arrival among buffered packets.
func (r *reorder) resetGapSince() {
	first := true
	for i, n := uint16(0), 0; n < r.count && i < reorderWindow; i++ {
		sl := &r.slots[(r.next+i)%reorderWindow]
		if !sl.ok {
			continue
		}
		n++
		if first || sl.arrival.Before(r.gapSince) {
			r.gapSince, first = sl.arrival, false
		}
	}
}
