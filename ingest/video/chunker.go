package video

import "time"

// Every frame adds to its chunk's headers: its PTS (at most 20 characters)
// in frame-pts, its size in frame-sizes and maybe its index in frame-keys,
// each with a separator that the centre may escape to 3 bytes.
// frameHeaderBytes is that cost rounded up; chunkHeaderBytes covers the
// chunk's fixed headers. Both count toward chunk_max_bytes, so that a chunk
// with its headers fits the centre's max payload whatever the frame sizes.
const (
	frameHeaderBytes = 48
	chunkHeaderBytes = 512
)

// frameLimit is the largest frame (parameter sets included) that fits a
// chunk of maxBytes on its own.
func frameLimit(maxBytes int) int { return maxBytes - chunkHeaderBytes - frameHeaderBytes }

// chunkCost is what a chunk of payload bytes and frames counts toward
// chunk_max_bytes: its payload and its headers.
func chunkCost(payload, frames int) int {
	return payload + frames*frameHeaderBytes + chunkHeaderBytes
}

// chunker collects frames into chunks: a new chunk at every keyframe, at a
// change of time base (estimated ↔ SR, or a report that moved the times
// back) and after a discontinuity; a chunk
// is cut before its payload and headers would exceed maxBytes, before it
// would hold more than maxFrames frames, or span maxDur.
type chunker struct {
	codec     Codec
	maxBytes  int
	maxFrames int
	maxDur    int64
	cur       *Chunk
	// rtp holds the RTP time of each frame of cur (for redate).
	rtp []uint32
	// started is the arrival of the current chunk's first frame (for tick).
	started time.Time
	// disc: the next chunk starts after a discontinuity.
	disc bool
	// last is the payload size of the previous chunk (capacity hint).
	last int
}

// sizeHint is the capacity of a new chunk's payload: a little more than
// the last chunk, so appending frames rarely copies.
func (c *chunker) sizeHint(first int) int {
	n := c.last + c.last/4
	if n < first {
		n = first
	}
	if n > c.maxBytes {
		n = c.maxBytes
	}
	return n
}

func newChunker(codec Codec, maxBytes, maxFrames int, maxDur time.Duration) *chunker {
	return &chunker{codec: codec, maxBytes: maxBytes, maxFrames: maxFrames, maxDur: int64(maxDur), disc: true}
}

// discontinuity closes the current chunk and flags the next one.
func (c *chunker) discontinuity(emit func(*Chunk)) {
	c.flush(emit)
	c.disc = true
}

// add appends frame f with its PTS; emit receives chunks that are complete.
func (c *chunker) add(f *frame, ssrc uint32, pts int64, estimated bool, emit func(*Chunk)) {
	if cur := c.cur; cur != nil {
		first := cur.Frames[0].PTS
		// A sender report that moved the mapping back (drift within
		// max_clock_jump) dates this frame at or before the last: a new
		// chunk, so that each chunk's frame times increase.
		back := pts <= cur.Frames[len(cur.Frames)-1].PTS
		if f.key || back || estimated != cur.Estimated || cur.SSRC != ssrc || pts-first >= c.maxDur ||
			len(cur.Frames) >= c.maxFrames ||
			chunkCost(len(cur.Payload)+len(f.data), len(cur.Frames)+1) > c.maxBytes {
			c.flush(emit)
		}
	}
	if c.cur == nil {
		c.cur = &Chunk{Codec: c.codec, SSRC: ssrc, Estimated: estimated, Discontinuity: c.disc,
			Payload: make([]byte, 0, c.sizeHint(len(f.data)))}
		c.disc = false
		c.started = f.arrival
	}
	c.cur.Frames = append(c.cur.Frames, FrameInfo{PTS: pts, Size: len(f.data), Key: f.key})
	c.rtp = append(c.rtp, f.rtpTime)
	c.cur.Payload = append(c.cur.Payload, f.data...)
}

// tick closes a chunk that has waited maxDur since its first frame arrived,
// so a stalled stream does not hold its last frames back.
func (c *chunker) tick(now time.Time, emit func(*Chunk)) {
	if c.cur != nil && now.Sub(c.started) >= time.Duration(c.maxDur) {
		c.flush(emit)
	}
}

// flush emits the current chunk, if any.
func (c *chunker) flush(emit func(*Chunk)) {
	if c.cur != nil {
		cur := c.cur
		c.cur, c.rtp = nil, c.rtp[:0]
		c.last = len(cur.Payload)
		emit(cur)
	}
}

// afterLost handles a chunk the store refused: the chunk being built is
// kept, flagged, if it starts with a keyframe (it decodes on its own);
// otherwise it is dropped. It returns the frames dropped and whether the
// stream must wait for a keyframe.
func (c *chunker) afterLost() (dropped int, waitKey bool) {
	if c.cur != nil && c.cur.Frames[0].Key {
		c.cur.Discontinuity = true
		return 0, false
	}
	if c.cur != nil {
		dropped = len(c.cur.Frames)
		c.cur, c.rtp = nil, c.rtp[:0]
	}
	c.disc = true
	return dropped, true
}

// redate gives the frames of the chunk being built the times of a sender
// report's mapping (pts of their RTP times) and clears its estimated
// flag, when it holds exactly the n frames of ssrc's session, all
// estimated: nothing the estimate dated has left the agent. It reports
// whether it did.
func (c *chunker) redate(ssrc uint32, n int, pts func(rtpTS uint32) int64) bool {
	cur := c.cur
	if cur == nil || !cur.Estimated || cur.SSRC != ssrc || len(cur.Frames) != n {
		return false
	}
	for i := range cur.Frames {
		cur.Frames[i].PTS = pts(c.rtp[i])
	}
	cur.Estimated = false
	return true
}
