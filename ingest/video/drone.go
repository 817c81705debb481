package video

import (
	"context"
	"errors"
	"time"

	"github.com/edge-agent/edge-agent/watermark"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// drone is the state machine of one drone's video: RTP packets and RTCP
// reports in, durable chunks out. It is deterministic: time comes only from
// the arrival times given to it. Not safe for concurrent use; the Ingest
// runs each drone on its own goroutine.
type drone struct {
	id, writer string
	cfg        *Config
	codecs     map[uint8]Codec
	seed       [][]byte // parameter sets from configured fmtp
	sink       Appender
	marks      Marks
	now        func() time.Time
	c          *droneCounters

	// queueDropped is how many RTP packets the drone's queue dropped
	// right before the datagram handed to rtp next (set by the drone's
	// loop from item.dropped).
	queueDropped int

	sess    *session
	chunker *chunker
	raw     rawBatch
	// waitKey: frames are skipped until the next keyframe (after a loss).
	waitKey bool
	// pending chunks wait to be appended after the current packet.
	pending []*Chunk
	// pendingSR is the last SR for an SSRC with no session yet.
	pendingSR *rtcp.SenderReport
	// noted is the last time noted for the writer (kept monotone).
	noted int64
	// lastSeen is the arrival of the last packet.
	lastSeen time.Time
	// conn is the RTSP connection of the last pulled packet (nil: pushed).
	conn *sourceConn
	pkt  rtp.Packet
}

// session is the state of one SSRC of a drone.
type session struct {
	ssrc    uint32
	codec   Codec
	reorder *reorder
	asm     *assembler
	clock   *clock
	// dated counts the frames the session's clock dated (see redate).
	dated int
}

func newDrone(id string, cfg *Config, dc *DroneConfig, sink Appender, marks Marks, now func() time.Time, c *droneCounters) *drone {
	if c == nil {
		c = &droneCounters{}
	}
	d := &drone{id: id, writer: WriterID(id), cfg: cfg, codecs: cfg.codecs(dc), sink: sink, marks: marks, now: now, c: c}
	if dc != nil {
		d.seed = dc.params
	}
	return d
}

// rtp handles one RTP datagram b (owned by the drone from now on).
func (d *drone) rtp(ctx context.Context, b []byte, arrival time.Time) error {
	dropped := d.queueDropped
	d.queueDropped = 0
	d.lastSeen = arrival
	d.c.packets.Add(1)
	d.c.bytes.Add(uint64(len(b)))
	if err := d.pkt.Unmarshal(b); err != nil || d.pkt.Version != 2 {
		d.c.malformed.Add(1)
		return nil
	}
	p := &d.pkt
	codec, ok := d.codecs[p.PayloadType]
	if !ok || (d.sess != nil && d.sess.ssrc == p.SSRC && d.sess.codec != codec) {
		d.c.rawPackets.Add(1)
		d.raw.add(b, arrival)
		if len(d.raw.buf) >= d.cfg.RawBatchBytes {
			return d.appendRaw(ctx)
		}
		return nil
	}
	if d.sess == nil || d.sess.ssrc != p.SSRC || d.sess.codec != codec {
		d.startSession(p.SSRC, codec)
	}
	d.sess.reorder.afterDrops(dropped)
	d.sess.reorder.push(p, arrival, d.deliver)
	return d.appendPending(ctx)
}

// startSession ends the current SSRC's session and starts one for ssrc.
func (d *drone) startSession(ssrc uint32, codec Codec) {
	if d.sess != nil {
		d.c.ssrcChanges.Add(1)
		d.sess.reorder.flushAll(d.deliver)
		d.sess.asm.flush()
	}
	if d.chunker == nil || d.chunker.codec != codec {
		if d.chunker != nil {
			d.chunker.flush(d.emit)
		}
		d.chunker = newChunker(codec, d.cfg.ChunkMaxBytes, d.cfg.ChunkMaxFrames, d.cfg.ChunkMaxDuration)
	}
	d.chunker.discontinuity(d.emit)
	d.waitKey = true
	s := &session{
		ssrc:    ssrc,
		codec:   codec,
		reorder: newReorder(d.cfg.ReorderPackets, d.cfg.ReorderMaxWait, d.c),
		asm:     newAssembler(codec, frameLimit(d.cfg.ChunkMaxBytes), d.c),
		clock:   newClock(d.cfg.ClockRate, d.cfg.MaxClockJump, d.cfg.MaxClockSkew),
	}
	s.asm.onDrop = d.frameDropped
	for _, ps := range d.seed {
		s.asm.params.update(codec.classify(ps), ps)
	}
	if sr := d.pendingSR; sr != nil && sr.SSRC == ssrc {
		s.clock.onSR(sr.NTPTime, sr.RTPTime, time.Time{}) // a new mapping: nothing to check against
	}
	d.pendingSR = nil
	d.sess = s
}

// reconnect starts the session of a new connection of an RTSP source:
// what arrived on the old one is flushed (its complete frames appended,
// a frame cut short dropped), the next chunk is flagged discontinuity
// and starts at a keyframe, and times are estimated until the new
// connection's first sender report. The codec and parameter sets are
// the ones the server described this time.
func (d *drone) reconnect(conn *sourceConn) {
	if d.sess != nil {
		d.sess.reorder.flushAll(d.deliver)
		d.sess.asm.flush()
		d.sess = nil
	}
	if d.chunker != nil {
		d.chunker.discontinuity(d.emit)
	}
	d.waitKey, d.pendingSR, d.conn = true, nil, conn
	d.codecs, d.seed = d.cfg.codecs(conn.dc), conn.dc.params
}

// deliver receives in-order packets from the reorder buffer.
func (d *drone) deliver(p *rtp.Packet, arrival time.Time, lost int) {
	if lost > 0 {
		d.sess.asm.loss()
		d.chunker.discontinuity(d.emit)
		d.waitKey = true
	}
	d.sess.asm.push(p, arrival, d.onFrame)
}

// frameDropped: the assembler dropped a frame (loss, malformed payload,
// too large); later frames may reference it, so wait for a keyframe.
func (d *drone) frameDropped() {
	d.chunker.discontinuity(d.emit)
	d.waitKey = true
}

// onFrame receives complete frames from the assembler.
func (d *drone) onFrame(f *frame) {
	if d.waitKey && !f.key {
		d.c.framesSkipped.Add(1)
		return
	}
	if len(f.data) > frameLimit(d.cfg.ChunkMaxBytes) { // with its parameter sets
		d.c.framesTooLarge.Add(1)
		d.c.framesDropped.Add(1)
		d.frameDropped()
		return
	}
	d.waitKey = false
	if f.noParams {
		d.c.keyframesNoParams.Add(1)
	}
	pts, est, jump := d.sess.clock.pts(f.rtpTime, f.arrival)
	d.sess.dated++
	if jump {
		d.c.clockJumps.Add(1)
		d.chunker.discontinuity(d.emit)
	}
	d.chunker.add(f, d.sess.ssrc, pts, est, d.emit)
}

func (d *drone) emit(c *Chunk) { d.pending = append(d.pending, c) }

// rtcpPacket handles one RTCP datagram (compound packets included).
func (d *drone) rtcpPacket(ctx context.Context, b []byte, arrival time.Time) error {
	d.lastSeen = arrival
	d.c.rtcp.Add(1)
	pkts, err := rtcp.Unmarshal(b)
	if err != nil {
		d.c.malformedRTCP.Add(1)
		return nil
	}
	for _, p := range pkts {
		sr, ok := p.(*rtcp.SenderReport)
		if !ok {
			continue
		}
		d.c.senderReports.Add(1)
		d.senderReport(sr, arrival)
	}
	return d.appendPending(ctx)
}

func (d *drone) senderReport(sr *rtcp.SenderReport, arrival time.Time) {
	if d.sess == nil || d.sess.ssrc != sr.SSRC {
		d.pendingSR = sr
		return
	}
	clk := d.sess.clock
	first := !clk.haveSR
	jump, skewed := clk.onSR(sr.NTPTime, sr.RTPTime, arrival)
	if skewed {
		d.c.srSkewed.Add(1)
	}
	// The session's first report, when every frame dated so far from
	// arrival times is still in the chunk being built: RTP and RTCP come
	// in on separate sockets (and goroutines), so a report sent before
	// the first frame can reach the drone after it was dated. Those
	// frames take the report's times, the chunk is not estimated, and
	// the estimate it replaced is no jump: nothing it dated has left.
	if first && !skewed && d.chunker.redate(d.sess.ssrc, d.sess.dated, func(ts uint32) int64 {
		ns, _, _ := clk.pts(ts, time.Time{})
		return ns
	}) {
		jump = false
	}
	if jump {
		d.c.clockJumps.Add(1)
		d.chunker.discontinuity(d.emit)
	}
}

// tick runs the timers: reorder gaps past max wait, chunks past max
// duration, raw batches past their age.
func (d *drone) tick(ctx context.Context, now time.Time) error {
	if d.sess != nil {
		d.sess.reorder.expire(now, d.deliver)
		d.chunker.tick(now, d.emit)
	}
	if err := d.appendPending(ctx); err != nil {
		return err
	}
	if d.raw.n > 0 && now.Sub(d.raw.first) >= d.cfg.RawBatchAge {
		return d.appendRaw(ctx)
	}
	return nil
}

// close flushes everything complete and closes the writer.
func (d *drone) close(ctx context.Context) error {
	if d.sess != nil {
		d.sess.reorder.flushAll(d.deliver)
		d.sess.asm.flush()
		d.chunker.flush(d.emit)
	}
	err := d.appendPending(ctx)
	if d.raw.n > 0 {
		err = errors.Join(err, d.appendRaw(ctx))
	}
	if d.marks != nil {
		err = errors.Join(err, d.marks.CloseWriter(d.writer))
	}
	return err
}

// appendPending appends the chunks completed by the last input, in order.
func (d *drone) appendPending(ctx context.Context) error {
	var err error
	for i, c := range d.pending {
		if err != nil {
			c.Discontinuity = true // it follows a chunk that was lost
		}
		if e := d.appendChunk(ctx, c); e != nil && err == nil {
			err = e
		}
		d.pending[i] = nil
	}
	d.pending = d.pending[:0]
	return err
}

func (d *drone) appendChunk(ctx context.Context, c *Chunk) error {
	ev := c.Event(d.id, d.now().UnixNano())
	var adm watermark.Admission
	if d.marks != nil {
		adm = d.marks.Admit(d.writer, ev.EventTime, ev.IngestTime)
		ev.Flags |= adm.Flags()
		if adm.Late {
			d.c.lateChunks.Add(1)
		}
		if adm.Skew != watermark.SkewNone {
			d.c.clockSkewChunks.Add(1)
		}
	}
	pos, err := d.sink.Append(ctx, ev)
	if err != nil {
		// The chunk is lost: the stream resumes at a keyframe, flagged.
		d.c.appendErrors.Add(1)
		if d.chunker == nil {
			return err
		}
		dropped, wait := d.chunker.afterLost()
		d.c.framesDropped.Add(uint64(dropped))
		d.waitKey = d.waitKey || wait
		return err
	}
	d.c.chunks.Add(1)
	d.c.chunkBytes.Add(uint64(len(c.Payload)))
	d.c.framesOut.Add(uint64(len(c.Frames)))
	if c.Discontinuity {
		d.c.discontinuities.Add(1)
	}
	// The mark is bounded by the receiving clock: a chunk dated 2104 by an
	// absurd sender report must not stop later chunks from noting.
	if last := adm.Mark(c.Frames[len(c.Frames)-1].PTS); d.marks != nil && last > d.noted {
		d.noted = last
		return d.marks.NoteAdmitted(d.writer, adm, c.Frames[len(c.Frames)-1].PTS, pos)
	}
	return nil
}

func (d *drone) appendRaw(ctx context.Context) error {
	ev := d.raw.take(d.id, d.now().UnixNano())
	if d.marks != nil {
		ev.Flags |= d.marks.Admit(d.writer, ev.EventTime, ev.IngestTime).Flags()
	}
	if _, err := d.sink.Append(ctx, ev); err != nil {
		d.c.appendErrors.Add(1)
		return err
	}
	return nil
}
