package mavlink

// seqOutcome is what a frame's sequence number says about its component's stream.
type seqOutcome int

const (
	seqNext      seqOutcome = iota // the next number
	seqFirst                       // the component's first frame in this run: what came before is unknown
	seqGap                         // numbers were skipped: frames lost
	seqDuplicate                   // the last frame again (same number and checksum)
	seqJump                        // a number behind the last: reordered or restarted
)

// reorderWindow: a number up to this far behind the expected one is taken
// for a reordered or restarted sequence, not for the loss of ~200 frames.
const reorderWindow = 64

// note records f's sequence number in its component and says what it
// means; lost is the number of frames skipped (seqGap only).
func (c *component) note(seq uint8, crc uint16) (seqOutcome, int) {
	if !c.seen {
		c.seen, c.seq, c.crc = true, seq, crc
		return seqFirst, 0
	}
	if seq == c.seq && crc == c.crc {
		return seqDuplicate, 0
	}
	skipped := int(seq - c.seq - 1) // mod 256
	c.seq, c.crc = seq, crc
	switch {
	case skipped == 0:
		return seqNext, 0
	case skipped >= 256-reorderWindow:
		return seqJump, 0
	default:
		return seqGap, skipped
	}
}
