package video

import (
	"time"

	"github.com/pion/rtp"
)

// frame is one complete access unit in Annex-B.
type frame struct {
	// rtpTime is the RTP timestamp shared by the frame's packets.
	rtpTime uint32
	// key is true for IDR (H.264) / IRAP (H.265) frames.
	key bool
	// data is the Annex-B access unit, parameter sets first for keyframes.
	// Only valid until the next call into the assembler.
	data []byte
	// arrival is when the last packet of the frame arrived.
	arrival time.Time
	// noParams is true for a keyframe that could not be given its parameter sets.
	noParams bool
}

// assembler groups in-order RTP packets into frames: a frame is the packets
// sharing one timestamp, ended by the marker bit or a new timestamp. A frame
// touched by loss, a malformed payload or an unfinished fragment is dropped
// whole, never passed on.
type assembler struct {
	codec    Codec
	maxBytes int
	dp       depacketizer
	params   paramSets
	c        *droneCounters

	active  bool      // a frame is being assembled
	ts      uint32    // its RTP timestamp
	broken  bool      // it will be dropped
	buf     []byte    // its Annex-B bytes so far
	have    uint8     // bit k set: a NAL of kind k seen
	arrival time.Time // last packet's arrival
	// lossPending: packets were lost just before the next pushed packet.
	lossPending bool
	// out is the frame handed to emit (reused).
	out []byte
	// onDrop is called when a frame is dropped: the stream must resume at
	// a keyframe, flagged discontinuous.
	onDrop func()
}

func newAssembler(codec Codec, maxBytes int, c *droneCounters) *assembler {
	return &assembler{codec: codec, maxBytes: maxBytes, dp: depacketizer{codec: codec}, c: c}
}

// loss tells the assembler that packets are missing before the next packet.
func (a *assembler) loss() { a.lossPending = true }

// push consumes one in-order packet and calls emit for each completed frame.
func (a *assembler) push(p *rtp.Packet, arrival time.Time, emit func(*frame)) {
	if len(p.Payload) == 0 { // keep-alive or padding-only packet
		return
	}
	lost := a.lossPending
	a.lossPending = false
	if a.active && p.Timestamp != a.ts {
		// The previous frame ended without its marker; if packets were
		// lost at this boundary they may have been its tail.
		if lost {
			a.broken = true
		}
		a.finish(emit)
	} else if a.active && lost {
		a.broken = true
	}
	if !a.active {
		a.begin(p.Timestamp)
		a.broken = lost // the lost packets may have been this frame's head
	}
	a.arrival = arrival
	if !a.broken {
		if err := a.dp.push(p.Payload, a.addNAL); err != nil {
			a.c.malformedPayload.Add(1)
			a.broken = true
		} else if len(a.buf)+len(a.dp.fu) > a.maxBytes {
			// Checked while the frame is assembled, fragments included: a
			// frame that never ends holds at most maxBytes plus one packet.
			a.c.framesTooLarge.Add(1)
			a.broken = true
			a.release()
		}
	}
	if p.Marker {
		a.finish(emit)
	}
}

// flush drops the frame in progress (end of session).
func (a *assembler) flush() {
	if a.active && len(a.buf) > 0 {
		a.c.framesDropped.Add(1)
	}
	a.active = false
	a.dp.reset()
}

// release gives back the buffers of a frame too large to keep: they grew
// to maxBytes, far more than a normal frame needs.
func (a *assembler) release() {
	a.buf, a.out = nil, nil
	a.dp.fu, a.dp.inFU = nil, false
}

func (a *assembler) begin(ts uint32) {
	a.active, a.ts, a.broken, a.buf, a.have = true, ts, false, a.buf[:0], 0
	a.dp.reset()
}

// addNAL appends one NAL unit to the frame and caches parameter sets.
func (a *assembler) addNAL(nal []byte) {
	k := a.codec.classify(nal)
	a.params.update(k, nal)
	a.have |= 1 << k
	a.buf = append(a.buf, startCode...)
	a.buf = append(a.buf, nal...)
}

// finish ends the frame in progress and emits it if it is whole.
func (a *assembler) finish(emit func(*frame)) {
	a.active = false
	if a.dp.inFU {
		a.broken = true
	}
	if a.broken {
		a.c.framesDropped.Add(1)
		a.dp.reset()
		if a.onDrop != nil {
			a.onDrop()
		}
		return
	}
	if len(a.buf) == 0 {
		return
	}
	f := frame{rtpTime: a.ts, key: a.have&(1<<nalKey) != 0, arrival: a.arrival, data: a.buf}
	if f.key {
		if prefix := a.params.prefix(a.codec, a.have); len(prefix) > 0 {
			a.out = append(append(a.out[:0], prefix...), a.buf...)
			f.data = a.out
		}
		f.noParams = !a.params.complete(a.codec)
	}
	emit(&f)
}
