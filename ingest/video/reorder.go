package video

import (
	"time"

	"github.com/pion/rtp"

	"github.com/edge-agent/edge-agent/ingest/sequence"
)

// reorderWindow is the ring size of the reorder buffer: a packet more than
// this many sequence numbers ahead cannot wait in it.
const reorderWindow = 512

// maxMisorder is how far behind the start of a session a packet may be
// and still move the start back (RFC 3550 A.1 MAX_MISORDER).
const maxMisorder = 100

// rtpSeq is the shared sequence window's shape for RTP (ingest/sequence
// says what each packet is: new, duplicate, reordered, late, restart; the
// buffer below only puts packets back in order for the depacketizer): 16
// bits; the 512 newest numbers remembered; ahead by more than 512 is a
// jump, taken for a restart of the sender's numbering once the next
// packet follows it (RFC 3550 A.1); the RTP timestamp as the tag, so a
// number seen before with another timestamp is a restarted sender, not a
// copy.
var rtpSeq = sequence.Config{Bits: 16, Window: reorderWindow, MaxJump: reorderWindow, Probation: true, Tags: true}

// reorder puts the packets of one SSRC back in sequence-number order (16-bit
// wrap). It holds at most maxPackets packets, and a packet waits at most
// maxWait for the gap before it to fill; then the gap is given up (the
// window counts it lost). What each packet is — and so the duplicates,
// late packets, losses and restarts counted — is the shared window's
// answer (rtpSeq).
type reorder struct {
	maxPackets int
	maxWait    time.Duration
	c          *droneCounters
	seq        *sequence.Window

	started bool
	// warm: the first packets are held until warmPackets arrived or maxWait
	// passed, so that a reordered start is not taken for late packets.
	warm  bool
	next  uint16 // next sequence number to deliver
	count int    // packets buffered
	// gapSince is when the oldest buffered packet arrived.
	gapSince time.Time
	slots    [reorderWindow]reorderSlot
}

// afterDrops says that the queue dropped n packets before the next push:
// a jump ahead they explain is a loss, not a restart of the numbering.
func (r *reorder) afterDrops(n int) { r.seq.AfterDrops(n) }

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
	return &reorder{maxPackets: maxPackets, maxWait: maxWait, c: c, seq: sequence.MustNew(rtpSeq)}
}

// push adds one packet and delivers whatever is now in order.
func (r *reorder) push(p *rtp.Packet, arrival time.Time, out deliverFunc) {
	s := p.SequenceNumber
	res := r.seq.Observe(uint32(s), p.Timestamp)
	r.lost(res.Lost)
	switch res.Kind {
	case sequence.Duplicate:
		r.c.duplicates.Add(1)
		return
	case sequence.Late, sequence.Suspect:
		// Late: its gap was given up. Suspect: far off, waiting for a
		// second packet to confirm a restart.
		r.c.late.Add(1)
		return
	case sequence.Restart:
		r.c.seqJumps.Add(1)
		r.flushAll(out)
		r.started, r.next = true, s
		r.deliver(p, arrival, 1, out) // a jump is a discontinuity
		return
	}
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
		r.deliver(p, arrival, 0, out)
		r.drain(out)
	case d < 0:
		// New to the window (from before the session's start) but behind
		// what was delivered: too late for the depacketizer.
		r.c.late.Add(1)
	case int(d) >= reorderWindow:
		// Further ahead than the ring holds (a jump the queue's drops
		// explain): the gaps are given up.
		r.flushAll(out)
		lost := int(uint16(s - r.next))
		r.lost(r.seq.GiveUpBefore(uint32(s)))
		r.next = s
		r.deliver(p, arrival, lost, out)
	default:
		sl := &r.slots[s%reorderWindow]
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

func (r *reorder) lost(n int) {
	if n > 0 {
		r.c.lost.Add(uint64(n))
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

// expire gives up the gap that the oldest buffered packet has waited for
// longer than maxWait, and delivers what follows it.
func (r *reorder) expire(now time.Time, out deliverFunc) {
	if r.warm && now.Sub(r.gapSince) >= r.maxWait {
		r.endWarm(out)
	}
	for r.count > 0 && now.Sub(r.gapSince) >= r.maxWait {
		r.skipGap(out)
	}
}

// flushAll delivers every buffered packet in order, giving up the gaps.
func (r *reorder) flushAll(out deliverFunc) {
	r.warm = false
	for r.count > 0 {
		r.skipGap(out)
	}
}

// skipGap gives up the gap before the first buffered packet.
func (r *reorder) skipGap(out deliverFunc) {
	skipped := 0
	for !r.slots[r.next%reorderWindow].ok {
		r.lost(r.seq.GiveUp(uint32(r.next)))
		r.next++
		skipped++
	}
	sl := &r.slots[r.next%reorderWindow]
	p, a := sl.pkt, sl.arrival
	*sl = reorderSlot{}
	r.count--
	r.deliver(&p, a, skipped, out)
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
