package video

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
	"github.com/edge-agent/edge-agent/wire"
)

// h264Packet marshals one RTP packet of SSRC 7, payload type 96.
func h264Packet(t testing.TB, seq uint16, ts uint32, marker bool, payload []byte) []byte {
	t.Helper()
	p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: ts,
		SSRC: 7, Marker: marker}, Payload: payload}
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Tiny H.264 parameter sets and slices: enough for the assembler, which
// only classifies NAL units by type.
var (
	testSPS = []byte{0x67, 0x42, 0x00, 0x1f, 0xe9}
	testPPS = []byte{0x68, 0xce, 0x38, 0x80}
)

func slice(idr bool, n int) []byte {
	b := make([]byte, n)
	b[0] = 0x41 // non-IDR slice
	if idr {
		b[0] = 0x65
	}
	for i := 1; i < n; i++ {
		b[i] = byte(i) | 1
	}
	return b
}

// assemblyBytes is what the drone holds for the frame being assembled.
func assemblyBytes(d *drone) int {
	if d.sess == nil {
		return 0
	}
	return cap(d.sess.asm.buf) + cap(d.sess.asm.dp.fu)
}

// TestEndlessFragmentBounded: one SSRC sends FU-A fragments that never
// end (no end bit, no marker, one timestamp). The frame cap applies while
// the frame is assembled: memory stays below chunk_max_bytes, the frame
// counts as too large, and the stream resumes cleanly at the next keyframe.
func TestEndlessFragmentBounded(t *testing.T) {
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	seq := uint16(1)
	send := func(ts uint32, marker bool, payload []byte) {
		if err := d.rtp(ctx, h264Packet(t, seq, ts, marker, payload), at); err != nil {
			t.Fatal(err)
		}
		seq++
		at = at.Add(time.Millisecond)
	}
	// A good keyframe first, then the endless fragment.
	send(1000, false, testSPS)
	send(1000, false, testPPS)
	send(1000, true, slice(true, 500))
	frag := make([]byte, 1200)
	frag[0], frag[1] = 0x7c, 0x85 // FU-A indicator, start bit, IDR
	send(4000, false, frag)
	frag[1] = 0x05 // middle fragments: no start, no end
	peak := 0
	for i := 0; i < 4000; i++ { // 4.8 MB of one fragment
		send(4000, false, frag)
		peak = max(peak, assemblyBytes(d))
	}
	// Slices grow by at most 2x: the frame and its fragment stay below
	// 2 × chunk_max_bytes together.
	if limit := 2 * cfg.ChunkMaxBytes; peak > limit {
		t.Fatalf("a never-ending fragment holds %d bytes (limit %d)", peak, limit)
	}
	// The sender recovers: a keyframe and a P frame on new timestamps.
	send(8000, false, testSPS)
	send(8000, false, testPPS)
	send(8000, true, slice(true, 700))
	send(11000, true, slice(false, 300))
	if err := d.close(ctx); err != nil {
		t.Fatal(err)
	}
	st := d.c.snapshot()
	if st.FramesTooLarge != 1 || st.FramesDropped != 1 {
		t.Fatalf("too large %d dropped %d, want 1 and 1", st.FramesTooLarge, st.FramesDropped)
	}
	got := decodeAll(t, sink.snapshot())
	if len(got.frames) != 3 || !got.frames[1].Key {
		t.Fatalf("frames %+v, want keyframe, keyframe, P", got.frames)
	}
	if !got.events[len(got.events)-1].Flags.Has(localstream.FlagDiscontinuity) {
		t.Fatal("the chunk after the dropped frame is not flagged discontinuity")
	}
}

// maxCentralPayload is the central store's default max payload (NATS 1 MiB).
const maxCentralPayload = 1 << 20

// TestChunkFitsCentralMessage: a sender that makes every small packet a
// frame (marker on each) must not produce a chunk whose central message —
// payload and headers (Edge-Frame-Pts grows with the frames) — exceeds the
// centre's max payload. Layout 1 (one message per event, headers in NATS
// headers with escaping) is the larger encoding; layout 2 packs the same
// headers as plain strings.
func TestChunkFitsCentralMessage(t *testing.T) {
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	seq, ts := uint16(1), uint32(1000)
	send := func(marker bool, payload []byte) {
		if err := d.rtp(ctx, h264Packet(t, seq, ts, marker, payload), at); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	send(false, testSPS)
	send(false, testPPS)
	send(true, slice(true, 130))
	for i := 0; i < 7000; i++ { // 7,000 frames in 1.4 s of RTP time
		ts += 18
		at = at.Add(200 * time.Microsecond)
		send(true, slice(false, 130))
	}
	if err := d.close(ctx); err != nil {
		t.Fatal(err)
	}
	frames := 0
	for i, ev := range sink.snapshot() {
		rec := localstream.Record{Event: ev, Position: localstream.Position{Segment: 1<<32 | 7, Offset: 1 << 40}}
		m := wire.EncodeEvent("video", "agent-0123456789", 1<<40, rec)
		if m.Size() > maxCentralPayload {
			c, _ := DecodeChunk(ev)
			t.Fatalf("chunk %d of %d frames makes a central message of %d bytes (max %d)",
				i, len(c.Frames), m.Size(), maxCentralPayload)
		}
		c, err := DecodeChunk(ev)
		if err != nil {
			t.Fatal(err)
		}
		frames += len(c.Frames)
	}
	if frames != 7001 {
		t.Fatalf("%d frames stored, want 7001", frames)
	}
}

// TestSSRCFloodEvictsIdleDrones: 10,000 distinct SSRCs, each passing
// probation with two packets in sequence and then falling silent, must
// neither grow the drones without bound nor lock out a real drone that
// starts after them: the slots of discovered drones idle for evict_idle
// are given to newcomers (counted).
func TestSSRCFloodEvictsIdleDrones(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	sink := &recordSink{}
	cfg := NewDefaultConfig()
	cfg.RTCPListen = "mux"
	cfg.Now = clock
	in, addr := startIngest(t, cfg, Sink{Stream: sink})
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const flood = 10_000
	pkt := make([]byte, 12+20)
	pkt[0], pkt[1], pkt[12] = 0x80, 96, 0x41
	for s := 0; s < flood; s++ {
		for seq := 0; seq < 2; seq++ {
			binary.BigEndian.PutUint16(pkt[2:], uint16(seq))
			binary.BigEndian.PutUint32(pkt[8:], uint32(0x5000_0000+s))
			if _, err := conn.Write(pkt); err != nil {
				t.Fatal(err)
			}
		}
		if s%200 == 0 {
			time.Sleep(time.Millisecond) // paced: stay within the socket buffer
		}
	}
	testkit.WaitFor(t, 20*time.Second, "flood datagrams", func() bool {
		st := in.Stats()
		return st.Datagrams+st.KernelDrops >= 2*flood
	})
	st := in.Stats()
	if st.Drones > cfg.MaxDrones {
		t.Fatalf("%d drones after the flood (max %d)", st.Drones, cfg.MaxDrones)
	}
	offset.Store(int64(3 * time.Second)) // the flood's drones are idle now
	id := "ssrc-" + ssrcHex(c.pkts)
	if _, err := replay.SendPackets(context.Background(), c.pkts, c.port, addr, replay.Options{Speed: 2, Mux: true}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the real drone's packets", func() bool {
		st := in.Stats()
		return st.PerDrone[id].Packets+st.PerDrone[id].RTCP >= uint64(len(c.pkts))-st.KernelDrops
	})
	stopIngest(in)
	st = in.Stats()
	t.Logf("drones started %d, evicted %d, refused %d, active %d", st.DronesStarted, st.Evicted, st.TooManyDrones, st.Drones)
	if st.Evicted == 0 {
		t.Fatal("no idle drone was evicted")
	}
	got := decodeAll(t, byDrone(sink.snapshot())[id])
	if st.KernelDrops == 0 {
		checkFramesAs(t, c, got, expectedPTS(c.pkts), id)
	} else if len(got.frames) == 0 {
		t.Fatal("the real drone stored nothing")
	}
}

// TestDroneIDBounds: configured video drone ids are 1 to 128 bytes of
// [A-Za-z0-9._-]; anything else is refused naming the field.
func TestDroneIDBounds(t *testing.T) {
	for id, ok := range map[string]bool{
		"drone-1": true, strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
		"": false, "d 1": false, "d.*>": false, "дрон": false, "-x": false,
	} {
		cfg := NewDefaultConfig()
		cfg.Drones = []DroneConfig{{ID: id, SSRC: 1}}
		err := cfg.Validate()
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "drones[0].id")) {
			t.Errorf("id %.20q: %v", id, err)
		}
	}
}

// TestDropsLoggedWhileRunning: a flood of garbage is logged while it
// happens — within seconds, not at shutdown — and in a bounded number of
// lines, not one per datagram.
func TestDropsLoggedWhileRunning(t *testing.T) {
	var logs testkit.SyncBuffer
	cfg := NewDefaultConfig()
	cfg.RTCPListen = "mux"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	in, addr := startIngest(t, cfg, Sink{Stream: &recordSink{}})
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := 0; i < 5000; i++ {
		conn.Write([]byte{0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) // version 0: not RTP
		if i%500 == 0 {
			time.Sleep(time.Millisecond) // paced: within the socket buffer
		}
	}
	testkit.WaitFor(t, 10*time.Second, "a drop report while running", func() bool {
		return strings.Contains(logs.String(), "dropped since the last report")
	})
	if n := strings.Count(logs.String(), "\n"); n > 2 || in.Stats().NotRTP == 0 {
		t.Fatalf("%d log lines for %d drops:\n%s", n, in.Stats().NotRTP, logs.String())
	}
}

// blockingSink blocks every Append until release is closed.
type blockingSink struct {
	recordSink
	release chan struct{}
}

func (s *blockingSink) Append(ctx context.Context, ev localstream.Event, o ...localstream.AppendOption) (localstream.Position, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return s.recordSink.Append(ctx, ev, o...)
}

// TestQueueBytesBound: a drone whose appends stall (a slow store) while
// large datagrams keep coming queues at most queue_bytes of them in total;
// the rest are dropped and counted, and nothing is held for garbage.
func TestQueueBytesBound(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	cfg := NewDefaultConfig()
	cfg.RTCPListen = "mux"
	cfg.QueueBytes = 1 << 20
	cfg.Drones = []DroneConfig{{ID: "big", SSRC: 9}}
	in, addr := startIngest(t, cfg, Sink{Stream: sink})
	defer close(sink.release)
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := make([]byte, 8000)
	b[0], b[1] = 0x80, 100 // payload type 100: stored raw, 64 KiB batches
	binary.BigEndian.PutUint32(b[8:], 9)
	peak := int64(0)
	for seq := 0; seq < 2000; seq++ { // 16 MB
		binary.BigEndian.PutUint16(b[2:], uint16(seq))
		conn.Write(b)
		if seq%50 == 0 {
			time.Sleep(time.Millisecond) // paced: within the socket buffer
			in.mu.Lock()
			peak = max(peak, in.router.queued.Load())
			in.mu.Unlock()
		}
	}
	testkit.WaitFor(t, 10*time.Second, "datagrams read", func() bool {
		st := in.Stats()
		return st.Datagrams+st.KernelDrops >= 2000
	})
	in.mu.Lock()
	peak = max(peak, in.router.queued.Load())
	in.mu.Unlock()
	st := in.Stats().PerDrone["big"]
	if peak > int64(cfg.QueueBytes) || st.QueueDrops == 0 {
		t.Fatalf("queued peak %d bytes (bound %d), queue drops %d", peak, cfg.QueueBytes, st.QueueDrops)
	}
}

// TestQueueDropsCountedLost (issue 30.8): packets a full drone queue drops
// are lost video and counted as such: the drone's lost counts every
// sequence number dropped, even when so many went that the next packet is
// far ahead (it is not taken for a restart of the numbering).
//
// Failed before: "queue drops 1887, kernel drops 0, lost 0" (seq jumps 1).
func TestQueueDropsCountedLost(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	cfg := NewDefaultConfig()
	cfg.RTCPListen = "mux"
	cfg.QueueBytes = 1 << 20
	cfg.Drones = []DroneConfig{{ID: "big", SSRC: 9}}
	in, addr := startIngest(t, cfg, Sink{Stream: sink})
	released := false
	defer func() {
		if !released {
			close(sink.release)
		}
	}()
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := make([]byte, 8000)
	b[0] = 0x80
	binary.BigEndian.PutUint32(b[8:], 9)
	// Raw packets first (payload type 100, stored in 64 KiB batches): the
	// drone blocks in the stalled store with its first batch.
	b[1] = 100
	for seq := range 16 {
		binary.BigEndian.PutUint16(b[2:], uint16(seq))
		conn.Write(b)
	}
	testkit.WaitFor(t, 10*time.Second, "the drone blocked in the store", func() bool { return in.Stats().PerDrone["big"].Packets >= 8 })
	// Then H.264 (96; non-IDR slices): the queue fills and drops.
	b[1], b[12] = 96, 0x41
	const n = 2000
	for seq := range n {
		binary.BigEndian.PutUint16(b[2:], uint16(seq))
		conn.Write(b)
		if seq%50 == 0 {
			time.Sleep(time.Millisecond) // paced: the queue, not the socket, drops
		}
	}
	testkit.WaitFor(t, 10*time.Second, "datagrams read", func() bool {
		st := in.Stats()
		return st.Datagrams+st.KernelDrops >= 16+n
	})
	close(sink.release)
	released = true
	testkit.WaitFor(t, 10*time.Second, "the queue drained", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.router.queued.Load() == 0
	})
	// A few more in sequence after the drops: the drone sees how far ahead
	// they are.
	for seq := n; seq < n+16; seq++ {
		binary.BigEndian.PutUint16(b[2:], uint16(seq))
		conn.Write(b)
	}
	var st DroneStats
	testkit.WaitFor(t, 10*time.Second, "the packets after the drops", func() bool {
		st = in.Stats().PerDrone["big"]
		return st.Packets >= 16+n+16-st.QueueDrops-in.Stats().KernelDrops
	})
	// The reorder gives up on the gaps after its wait: then they are lost
	// (the assertions below say what is missing if they never are).
	testkit.Until(10*time.Second, func() bool { st = in.Stats().PerDrone["big"]; return st.Lost >= st.QueueDrops && st.QueueDrops > 0 })
	st = in.Stats().PerDrone["big"]
	kernel := in.Stats().KernelDrops
	t.Logf("queue drops %d, kernel drops %d, lost %d, seq jumps %d", st.QueueDrops, kernel, st.Lost, st.SeqJumps)
	if st.QueueDrops == 0 {
		t.Fatal("no queue drops: the fault did not happen")
	}
	if st.Lost < st.QueueDrops || st.Lost > st.QueueDrops+kernel {
		t.Fatalf("queue drops %d, kernel drops %d, lost %d: want every dropped packet lost", st.QueueDrops, kernel, st.Lost)
	}
	if st.SeqJumps != 0 {
		t.Fatalf("%d sequence jumps: the drops were taken for a restart", st.SeqJumps)
	}
}
