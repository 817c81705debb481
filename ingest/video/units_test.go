package video

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
)

// TestReorderWrap runs sequence numbers across 65535→0 with a swap, a
// loss and a restart of the numbering.
func TestReorderWrap(t *testing.T) {
	c := &droneCounters{}
	r := newReorder(16, 50*time.Millisecond, c)
	var got []uint16
	var lost []int
	out := func(p *rtp.Packet, _ time.Time, l int) { got = append(got, p.SequenceNumber); lost = append(lost, l) }
	now := time.Unix(0, 0)
	push := func(seqs ...uint16) {
		for _, s := range seqs {
			r.push(&rtp.Packet{Header: rtp.Header{SequenceNumber: s}}, now, out)
		}
	}
	push(65530, 65532, 65531, 65533, 65534, 65535, 0, 1) // warm-up sorts the start
	push(3, 2, 4)                                        // swap across nothing lost
	push(6)                                              // 5 lost
	now = now.Add(60 * time.Millisecond)
	r.expire(now, out)
	push(6, 4)  // duplicate, and a duplicate far behind
	push(40000) // far jump: suspected restart, dropped
	push(40001) // confirmed: restart
	push(40002)
	want := []uint16{65530, 65531, 65532, 65533, 65534, 65535, 0, 1, 2, 3, 4, 6, 40001, 40002}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if lost[11] != 1 || lost[12] == 0 {
		t.Fatalf("lost flags %v", lost)
	}
	s := c.snapshot()
	if s.Lost != 1 || s.Duplicates != 2 || s.Late != 1 || s.SeqJumps != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestClock checks NTP conversion, 32-bit RTP wrap, estimated time before
// the first SR, and the jump bound.
func TestClock(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 500_000_000, time.UTC).UnixNano()
	if got := ntpToUnixNano(unixNanoToNTP(base)); got-base > 1 || base-got > 1 {
		t.Fatalf("ntp round trip %d vs %d", got, base)
	}
	// NTP era 1 (after 2036-02-07): seconds wrap to small numbers.
	era1 := time.Date(2037, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	if got := ntpToUnixNano(unixNanoToNTP(era1) & (1<<64 - 1)); got != era1 {
		t.Fatalf("era 1: %d vs %d", got, era1)
	}
	c := newClock(90000, 500*time.Millisecond, 0)
	arr := time.Unix(0, base)
	var w uint32 = 4294967000 // wraps within the next 3000 ticks
	if p, est, _ := c.pts(w, arr); !est || p != base {
		t.Fatalf("first estimate %d %v", p, est)
	}
	// 3000 ticks later across the 32-bit wrap: +33.33 ms.
	if p, est, jump := c.pts(w+3000, arr.Add(40*time.Millisecond)); !est || jump || p != base+33_333_333 {
		t.Fatalf("wrapped estimate %d", p-base)
	}
	// An SR that agrees with the estimate within the bound: no jump.
	if jump, _ := c.onSR(unixNanoToNTP(base+100_000_000), w+9000, time.Time{}); jump {
		t.Fatal("consistent SR taken as a jump")
	}
	if p, est, _ := c.pts(w+90000, arr); est || p-(base+100_000_000+900_000_000) > 1 {
		t.Fatalf("after SR: %d est=%v", p-base, est)
	}
	// An SR moving time by 2 s is a jump.
	if jump, _ := c.onSR(unixNanoToNTP(base+2_100_000_000), w+9000, time.Time{}); !jump {
		t.Fatal("2 s shift not taken as a jump")
	}
}

// TestSRJumpFlagsDiscontinuity injects an SR 2 s off in the real capture.
func TestSRJumpFlagsDiscontinuity(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	pkts := append(c.pkts[:0:0], c.pkts...)
	// Shift the second SR by 2 s.
	for i, p := range pkts {
		if p.Kind == 2 && i > 0 {
			b := append([]byte(nil), p.Payload...)
			binary.BigEndian.PutUint64(b[8:16], binary.BigEndian.Uint64(b[8:16])+2<<32)
			pkts[i].Payload = b
		}
	}
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, pkts)
	got := decodeAll(t, sink.snapshot())
	if d.c.snapshot().ClockJumps != 1 || len(got.frames) != 180 {
		t.Fatalf("jumps %d frames %d", d.c.snapshot().ClockJumps, len(got.frames))
	}
	flagged := 0
	for i, ev := range got.events {
		if i > 0 && ev.Flags.Has(localstream.FlagDiscontinuity) {
			flagged++
			prev := got.chunks[i-1]
			if gap := ev.EventTime - prev.Frames[len(prev.Frames)-1].PTS; gap < int64(1900*time.Millisecond) {
				t.Fatalf("flagged chunk %d does not follow the jump (gap %s)", i, time.Duration(gap))
			}
		}
	}
	if flagged != 1 {
		t.Fatalf("%d chunks flagged after the jump, want 1", flagged)
	}
}

// TestNoSREstimated drops all RTCP: every chunk is flagged estimated and
// PTS follow the RTP clock from the first arrival.
func TestNoSREstimated(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	var pkts = c.pkts[:0:0]
	for _, p := range c.pkts {
		if p.Kind != 2 {
			pkts = append(pkts, p)
		}
	}
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, pkts)
	got := decodeAll(t, sink.snapshot())
	if len(got.frames) != 180 {
		t.Fatalf("%d frames", len(got.frames))
	}
	for _, ev := range got.events {
		if !ev.Flags.Has(localstream.FlagEstimatedTime) {
			t.Fatal("chunk without estimated flag")
		}
	}
	for i := 1; i < len(got.frames); i++ {
		if d := got.frames[i].PTS - got.frames[i-1].PTS; d < 33_322_000 || d > 33_334_000 {
			t.Fatalf("frame %d spacing %d", i, d)
		}
	}
}

// TestPionPacketizations re-packetizes the captured frames with pion's
// payloaders — single NAL units (large MTU) and small fragments — with the
// in-band parameter sets removed and given through the SDP fmtp instead:
// every frame comes out identical, keyframes with the fmtp's parameter sets.
func TestPionPacketizations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec Codec
		pl    func() rtp.Payloader
	}{
		{"h264", CodecH264, func() rtp.Payloader { return &codecs.H264Payloader{} }},
		{"h265", CodecH265, func() rtp.Payloader { return &codecs.H265Payloader{} }},
	} {
		c := loadCapture(t, tc.name, tc.codec)
		clean, _ := cleanRun(t, c)
		params, err := spropParameterSets(c.fmtp)
		if err != nil || len(params) < 2 {
			t.Fatalf("fmtp %q: %v", c.fmtp, err)
		}
		for _, mtu := range []uint16{60000, 1200, 300} {
			t.Run(tc.name+"/mtu"+itoa(int(mtu)), func(t *testing.T) {
				p := rtp.NewPacketizer(mtu, 96, 0x1234, tc.pl(), rtp.NewRandomSequencer(), 90000)
				cfg := testConfig()
				dc := DroneConfig{ID: "d1", SSRC: 0x1234, Codec: tc.codec, PayloadType: 96, Fmtp: c.fmtp}
				cfg.Drones = []DroneConfig{dc}
				if err := cfg.Validate(); err != nil {
					t.Fatal(err)
				}
				sink := &recordSink{}
				d := newDrone("d1", &cfg, &cfg.Drones[0], sink, nil, time.Now, nil)
				ctx := context.Background()
				now := time.Unix(1_800_000_000, 0)
				sr := &rtcp.SenderReport{SSRC: 0x1234, NTPTime: unixNanoToNTP(now.UnixNano()), RTPTime: 0}
				b, _ := sr.Marshal()
				_ = d.rtcpPacket(ctx, b, now)
				for i := range clean.frames {
					var au []byte
					for _, nal := range splitAnnexB(clean.data[i]) {
						if k := tc.codec.classify(nal); k == nalVPS || k == nalSPS || k == nalPPS {
							continue
						}
						au = append(append(au, startCode...), nal...)
					}
					for _, pkt := range p.Packetize(au, 3000) {
						pkt.Timestamp = uint32(i * 3000)
						raw, _ := pkt.Marshal()
						if err := d.rtp(ctx, raw, now); err != nil {
							t.Fatal(err)
						}
					}
				}
				_ = d.close(ctx)
				got := decodeAll(t, sink.snapshot())
				if len(got.frames) != len(clean.frames) {
					t.Fatalf("%d frames, want %d (stats %+v)", len(got.frames), len(clean.frames), d.c.snapshot())
				}
				var prefix []byte
				for _, ps := range params {
					prefix = append(append(prefix, startCode...), ps...)
				}
				for i, f := range got.frames {
					want := clean.data[i]
					if f.Key {
						if !bytes.HasPrefix(got.data[i], prefix) {
							t.Fatalf("keyframe %d lacks the fmtp parameter sets", i)
						}
						continue
					}
					if !bytes.Equal(got.data[i], want) || f.PTS != now.UnixNano()+int64(i*3000)*1e9/90000 {
						t.Fatalf("frame %d differs", i)
					}
				}
				if st := d.c.snapshot(); st.KeyframesNoParams != 0 || st.FramesDropped != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

// TestRawPayloadType stores packets of an unmapped payload type as raw
// batches with their arrival times.
func TestRawPayloadType(t *testing.T) {
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	var sent [][]byte
	for i := 0; i < 10; i++ {
		pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(i), SSRC: 9}, Payload: []byte{1, 2, byte(i)}}
		b, _ := pkt.Marshal()
		sent = append(sent, b)
		_ = d.rtp(ctx, append([]byte(nil), b...), now.Add(time.Duration(i)*time.Millisecond))
	}
	if err := d.tick(ctx, now.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	evs := sink.snapshot()
	if len(evs) != 1 || !evs[0].Flags.Has(localstream.FlagRaw) || evs[0].ContentType != ContentTypeRawRTP {
		t.Fatalf("events %+v", evs)
	}
	pk, err := DecodeRawBatch(evs[0].Payload)
	if err != nil || len(pk) != 10 {
		t.Fatalf("%d packets, %v", len(pk), err)
	}
	for i, p := range pk {
		if !bytes.Equal(p.Data, sent[i]) || p.Arrival != now.Add(time.Duration(i)*time.Millisecond).UnixNano() {
			t.Fatalf("packet %d differs", i)
		}
	}
}

// TestAppendFailure: a chunk the store refuses is counted; the stream
// resumes at the next keyframe with a discontinuity and stays decodable.
func TestAppendFailure(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	cfg := testConfig()
	sink := &recordSink{fail: func(i int) bool { return i == 2 }}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	ctx := context.Background()
	for _, p := range c.pkts {
		if p.Kind == 2 {
			_ = d.rtcpPacket(ctx, append([]byte(nil), p.Payload...), p.Time)
		} else {
			_ = d.rtp(ctx, append([]byte(nil), p.Payload...), p.Time)
		}
	}
	_ = d.close(ctx)
	got := decodeAll(t, sink.snapshot())
	st := d.c.snapshot()
	if st.AppendErrors != 1 || len(got.chunks) != 5 || st.FramesOut != 150 {
		t.Fatalf("%d chunks, stats %+v", len(got.chunks), st)
	}
	if !got.events[2].Flags.Has(localstream.FlagDiscontinuity) || !got.chunks[2].Frames[0].Key {
		t.Fatal("chunk after the refused one not flagged")
	}
	ffprobeDecodes(t, CodecH264, got.stream, 150)
}

// lateMarks reports every event before t as late.
type lateMarks struct {
	recordMarks
	t int64
}

func (m *lateMarks) Admit(_ string, ts, _ int64) watermark.Admission {
	return watermark.Admission{Late: ts < m.t}
}

// TestLateChunks: chunks whose time the watermark has passed are still
// stored, flagged late and counted.
func TestLateChunks(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	pts := expectedPTS(c.pkts)
	cfg := testConfig()
	sink := &recordSink{}
	m := &lateMarks{t: pts[90]} // chunks starting at frames 0, 30, 60 are late
	d := newDrone("d1", &cfg, nil, sink, m, time.Now, nil)
	feed(t, d, c.pkts)
	got := decodeAll(t, sink.snapshot())
	if len(got.frames) != 180 || d.c.snapshot().LateChunks != 3 {
		t.Fatalf("%d frames, %d late", len(got.frames), d.c.snapshot().LateChunks)
	}
	for i, ev := range got.events {
		if ev.Flags.Has(localstream.FlagLate) != (i < 3) {
			t.Fatalf("chunk %d late=%v", i, !(i < 3))
		}
	}
}
