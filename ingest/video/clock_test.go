package video

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
	"github.com/edge-agent/edge-agent/watermark"
)

// withSR returns a copy of the capture's packets where the n-th sender
// report (0-based) carries NTP time ntp, and, if insert, extra reports
// with the given NTP times are sent (RTP time of the first report) at the
// arrival times of later packets.
func withSR(pkts []replay.Packet, n int, ntp uint64, extra ...uint64) []replay.Packet {
	out := make([]replay.Packet, 0, len(pkts)+len(extra))
	var first []byte
	seen := 0
	for i, p := range pkts {
		if p.Kind == replay.RTCP && p.Payload[1] == 200 {
			b := append([]byte(nil), p.Payload...)
			if first == nil {
				first = append([]byte(nil), b...)
			}
			if seen == n && ntp != 0 {
				binary.BigEndian.PutUint64(b[8:16], ntp)
			}
			seen++
			p.Payload = b
		}
		out = append(out, p)
		if first != nil && len(extra) > 0 && i%60 == 59 {
			b := append([]byte(nil), first...)
			binary.BigEndian.PutUint64(b[8:16], extra[0])
			extra = extra[1:]
			out = append(out, replay.Packet{Time: p.Time, Kind: replay.RTCP, Payload: b})
		}
	}
	return out
}

// absurdNTP are sender-report times a broken sender was seen to send:
// 2^31 s (read as NTP era 0: 1968) and random bits (2104 and others).
func absurdNTP(rng *rand.Rand) []uint64 {
	return []uint64{1 << 31 << 32, rng.Uint64(), uint64(0xfffffff0) << 32}
}

// TestAbsurdSenderReportsIgnored: reports with absurd NTP times arriving
// while a good mapping is in use are ignored and counted; every frame
// keeps the time of the capture's real reports (no chunk dated 1968 or
// 2104, no discontinuity).
func TestAbsurdSenderReportsIgnored(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	c := loadCapture(t, "h264", CodecH264)
	bad := absurdNTP(rng)
	pkts := withSR(c.pkts, -1, 0, bad...)
	cfg := testConfig()
	cfg.MaxClockSkew = 10 * time.Second
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, pkts)
	st := d.c.snapshot()
	if st.SRSkewed != uint64(len(bad)) || st.ClockJumps != 0 {
		t.Fatalf("skewed reports %d (want %d), clock jumps %d", st.SRSkewed, len(bad), st.ClockJumps)
	}
	checkFrames(t, c, decodeAll(t, sink.snapshot()), expectedPTS(c.pkts))
}

// TestAbsurdFirstSenderReport: the first report is absurd (no good
// mapping yet), so chunks until the next report carry its time. Through a
// real watermark tracker they are flagged clock-skew and late, their marks
// bounded: no watermark dates to 1968 or passes the receiving clock, and
// the chunks after the good report are neither skewed nor late.
func TestAbsurdFirstSenderReport(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	pkts := withSR(c.pkts, 0, 1<<31<<32)
	s, err := localstream.Open(t.TempDir(), localstream.Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stream, err := s.CreateStream("video", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	clk := func() time.Time { return now }
	const skew = 10 * time.Second
	tr, err := watermark.NewTracker(stream, s, watermark.Options{Now: clk, MaxClockSkew: skew, MaxClockBehind: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.MaxClockSkew = skew
	d := newDrone("d1", &cfg, nil, stream, tr, clk, nil)
	ctx := context.Background()
	for _, p := range pkts {
		now = p.Time
		b := append([]byte(nil), p.Payload...)
		if p.Kind == replay.RTCP {
			err = d.rtcpPacket(ctx, b, p.Time)
		} else {
			err = d.rtp(ctx, b, p.Time)
		}
		if err == nil {
			err = d.tick(ctx, p.Time)
		}
		if err != nil {
			t.Fatal(err)
		}
		w, err := tr.Local()
		if err != nil {
			t.Fatal(err)
		}
		if !w.IsZero() && (w.UpperNs > now.Add(skew).UnixNano() || w.LowerNs < now.Add(-time.Hour).UnixNano()) {
			t.Fatalf("at %s: local watermark %s outside the receiving clock's bounds", now.Format(time.RFC3339Nano), w)
		}
	}
	if err := d.close(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := stream.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	skewed, good := 0, 0
	for _, r := range recs {
		y := time.Unix(0, r.EventTime).UTC().Year()
		switch {
		case y == 1968:
			skewed++
			if !r.Flags.Has(localstream.FlagClockSkew) || !r.Flags.Has(localstream.FlagLate) {
				t.Errorf("chunk at %d dated 1968 with flags %b, want clock-skew and late", r.Offset, r.Flags)
			}
		case r.Flags.Has(localstream.FlagClockSkew) || r.Flags.Has(localstream.FlagLate):
			t.Errorf("chunk at %d dated %s flags %b", r.Offset, time.Unix(0, r.EventTime).UTC(), r.Flags)
		default:
			good++
		}
	}
	if skewed == 0 || good == 0 || d.c.snapshot().ClockSkewChunks != uint64(skewed) {
		t.Fatalf("%d chunks dated 1968, %d good, %d counted skewed", skewed, good, d.c.snapshot().ClockSkewChunks)
	}
	t.Logf("%d chunks dated 1968 (flagged), %d after the good report; tracker %+v", skewed, good, tr.Stats())
}

// FuzzClockSenderReports drives one RTP clock with arbitrary sender
// reports (NTP and RTP times, arrival offsets) and frame times: it never
// panics; a report is ignored only when it is far from the receiving
// clock (its NTP time, or its mapping of the last frame dated, beyond the
// skew) while the mapping in use dates that frame within it; an ignored
// report leaves that mapping as it was, and later frames keep its time.
func FuzzClockSenderReports(f *testing.F) {
	f.Add(uint64(1<<31<<32), uint32(1000), int64(0), uint32(4000), false)
	f.Add(uint64(0xffffffffffffffff), uint32(0), int64(-5e9), uint32(1<<31), true)
	f.Add(unixNanoToNTP(1_800_000_000_000_000_000), uint32(90000), int64(3e9), uint32(0), true)
	f.Add(unixNanoToNTP(1_800_000_000_000_000_000), uint32(3600*90000), int64(0), uint32(9000), true)
	f.Fuzz(func(t *testing.T, ntp uint64, rtpTS uint32, arrivalOff int64, frameTS uint32, frameFirst bool) {
		const skew = int64(10 * time.Second)
		arrival := time.Unix(0, 1_800_000_000_000_000_000+arrivalOff%int64(time.Hour))
		c := newClock(90000, 500*time.Millisecond, time.Duration(skew))
		// A good first report, maybe a frame it dates, then the fuzzed report.
		c.onSR(unixNanoToNTP(arrival.UnixNano()), 0, arrival)
		srNs, srRTP := c.srNs, c.srRTP
		if frameFirst {
			c.pts(0, arrival)
		}
		_, skewed := c.onSR(ntp, rtpTS, arrival)
		ns, a := ntpToUnixNano(ntp), arrival.UnixNano()
		var want bool
		if frameFirst { // the frame at RTP 0 arrived at a, dated a: the mapping is good
			want = abs64(ns-a) > skew || abs64(ns+c.delta(0, rtpTS)-a) > skew
		} else {
			want = abs64(ns-a) > skew && abs64(srNs+c.delta(rtpTS, srRTP)-a) <= skew
		}
		if skewed != want {
			t.Fatalf("skewed=%v for NTP %d RTP %d (arrival %d, frame first %v)", skewed, ns, rtpTS, a, frameFirst)
		}
		if skewed {
			if c.srNs != srNs || c.srRTP != srRTP {
				t.Fatal("an ignored report changed the mapping")
			}
			if p, _, _ := c.pts(frameTS, arrival); p != srNs+c.delta(frameTS, srRTP) {
				t.Fatalf("a frame after an ignored report dated %d, the mapping in use gives %d", p, srNs+c.delta(frameTS, srRTP))
			}
			return
		}
		c.pts(frameTS, arrival)
	})
}

// TestSenderReportDriftBackKeepsChunksOrdered: a sender report that moves
// the mapping back by less than max_clock_jump (an RTP clock that strayed
// from the report clock: drift, not a jump) re-dates the frames after it
// at once. The chunk in progress is cut there, so that every chunk's
// frames keep increasing times (the step is between chunks, as at a
// switch from estimated times to reports); nothing is flagged.
func TestSenderReportDriftBackKeepsChunksOrdered(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	var out []replay.Packet
	var sr []byte
	for i, p := range c.pkts {
		if p.Kind == replay.RTCP && p.Payload[1] == 200 && sr == nil {
			sr = p.Payload
		}
		out = append(out, p)
		if sr != nil && i == len(c.pkts)/2+7 { // mid-chunk (a keyframe every 2 s)
			b := append([]byte(nil), sr...)
			binary.BigEndian.PutUint64(b[8:16], binary.BigEndian.Uint64(b[8:16])-(1<<32)/5)
			out = append(out, replay.Packet{Time: p.Time, Kind: replay.RTCP, Payload: b})
		}
	}
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, out)
	got := decodeAll(t, sink.snapshot())
	back := 0
	for i, ch := range got.chunks {
		for j := 1; j < len(ch.Frames); j++ {
			if ch.Frames[j].PTS <= ch.Frames[j-1].PTS {
				t.Fatalf("chunk %d of %d: frame %d at %d after %d", i, len(got.chunks), j, ch.Frames[j].PTS, ch.Frames[j-1].PTS)
			}
		}
		if i > 0 && ch.Frames[0].PTS <= got.chunks[i-1].Frames[len(got.chunks[i-1].Frames)-1].PTS {
			back++
			if ch.Discontinuity {
				t.Errorf("chunk %d: drift within max_clock_jump flagged discontinuity", i)
			}
		}
	}
	if back != 1 || len(got.frames) != len(c.frames) || d.c.snapshot().ClockJumps != 0 {
		t.Fatalf("%d chunks start before the previous one ends (want the one after the report), %d of %d frames, %d clock jumps",
			back, len(got.frames), len(c.frames), d.c.snapshot().ClockJumps)
	}
}
