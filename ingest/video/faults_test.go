package video

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// cleanRun runs the capture without faults and returns its frames by RTP
// timestamp (the reference every faulty run is compared with).
func cleanRun(t *testing.T, c capture) (decoded, map[int64][]byte) {
	cfg := testConfig()
	cfg.PayloadTypes = map[uint8]Codec{96: c.codec}
	sink := &recordSink{}
	feed(t, newDrone("d1", &cfg, nil, sink, nil, time.Now, nil), c.pkts)
	got := decodeAll(t, sink.snapshot())
	byPTS := map[int64][]byte{}
	for i, f := range got.frames {
		byPTS[f.PTS] = got.data[i]
	}
	return got, byPTS
}

// frameOf returns the index (in order of appearance) of the frame each
// packet belongs to, -1 for RTCP, and which frames are keyframes (from the
// clean run).
func frameIndex(pkts []replay.Packet) []int {
	idx := make([]int, len(pkts))
	n := -1
	var cur uint32
	for i, p := range pkts {
		if p.Kind != replay.RTP {
			idx[i] = -1
			continue
		}
		ts := binary.BigEndian.Uint32(p.Payload[4:8])
		if n < 0 || ts != cur {
			n++
			cur = ts
		}
		idx[i] = n
	}
	return idx
}

// TestLoss drops random RTP packets and checks the documented result:
// every frame touched by a loss is dropped (FramesDropped), whole frames
// after a loss are skipped until an intact keyframe (FramesSkipped), the
// chunk after a loss is flagged discontinuity and starts with a keyframe,
// every frame passed on is byte-identical to the clean run, and the
// output still decodes.
func TestLoss(t *testing.T) {
	for _, name := range []string{"h264", "h265"} {
		t.Run(name, func(t *testing.T) {
			codec := map[string]Codec{"h264": CodecH264, "h265": CodecH265}[name]
			c := loadCapture(t, name, codec)
			clean, byPTS := cleanRun(t, c)
			fidx := frameIndex(c.pkts)
			rng := rand.New(rand.NewPCG(testkit.Seed(t), 1))
			// The first and the last RTP packets are never dropped: a loss
			// before the first packet of a session or after its last cannot
			// be seen by anyone (the capture starts and ends with RTCP).
			isRTP := func(p replay.Packet) bool { return p.Kind == replay.RTP }
			firstRTP, lastRTP := slices.IndexFunc(c.pkts, isRTP), 0
			for i, p := range c.pkts {
				if isRTP(p) {
					lastRTP = i
				}
			}
			for round := 0; round < testkit.Rounds(3); round++ {
				var pkts []replay.Packet
				dropped := map[int]bool{}
				for i, p := range c.pkts {
					if p.Kind == replay.RTP && i > firstRTP && i < lastRTP && rng.IntN(100) == 0 {
						dropped[i] = true
						continue
					}
					pkts = append(pkts, p)
				}
				if len(dropped) == 0 {
					continue
				}
				// The model: frames holding a lost packet, or whose first
				// received packet follows a gap, are broken; after a gap,
				// frames are skipped until an intact keyframe.
				broken := map[int]bool{}
				for i := range c.pkts {
					if dropped[i] {
						broken[fidx[i]] = true
						for j := i + 1; j < len(c.pkts); j++ {
							if !dropped[j] && fidx[j] >= 0 {
								broken[fidx[j]] = true
								break
							}
						}
					}
				}
				var want []int
				waiting := false
				for f := range clean.frames {
					if broken[f] {
						waiting = true
						continue
					}
					if waiting && !clean.frames[f].Key {
						continue
					}
					waiting = false
					want = append(want, f)
				}
				cfg := testConfig()
				cfg.PayloadTypes = map[uint8]Codec{96: codec}
				sink := &recordSink{}
				d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
				feed(t, d, pkts)
				got := decodeAll(t, sink.snapshot())
				st := d.c.snapshot()
				if st.Lost != uint64(len(dropped)) {
					t.Fatalf("lost %d, dropped %d", st.Lost, len(dropped))
				}
				if len(got.frames) != len(want) {
					t.Fatalf("round %d: %d frames out, model says %d (dropped pkts %d, stats %+v)", round, len(got.frames), len(want), len(dropped), st)
				}
				for i, f := range got.frames {
					ref := clean.frames[want[i]]
					if !near(f.PTS, ref.PTS) || !bytes.Equal(got.data[i], byPTS[ref.PTS]) {
						t.Fatalf("round %d: frame %d differs from the clean run's frame %d: pts %d/%d len %d/%d key %v", round, i, want[i], f.PTS, ref.PTS, len(got.data[i]), len(byPTS[ref.PTS]), f.Key)
					}
				}
				if int(st.FramesDropped+st.FramesSkipped+st.FramesOut) != len(clean.frames) {
					t.Fatalf("dropped %d + skipped %d + out %d != %d", st.FramesDropped, st.FramesSkipped, st.FramesOut, len(clean.frames))
				}
				// Each chunk that follows missing frames is flagged and starts
				// with a keyframe; no other chunk is flagged.
				pos := 0
				for i, ch := range got.chunks {
					first := want[pos]
					gap := i == 0 || first != want[pos-1]+1
					if got.events[i].Flags.Has(localstream.FlagDiscontinuity) != gap {
						t.Fatalf("round %d: chunk %d discontinuity=%v, gap=%v", round, i, !gap, gap)
					}
					if gap && !ch.Frames[0].Key {
						t.Fatalf("round %d: chunk %d after a gap starts without a keyframe", round, i)
					}
					pos += len(ch.Frames)
				}
				if round == 0 {
					ffprobeDecodes(t, codec, got.stream, len(got.frames))
				}
				t.Logf("round %d: %d packets lost, %d frames dropped, %d skipped, %d out", round, st.Lost, st.FramesDropped, st.FramesSkipped, st.FramesOut)
			}
		})
	}
}

// near compares PTS computed through different (consistent) Sender
// Reports: a frame held in the reorder buffer while an SR arrives is mapped
// through the newer SR, which may round 1 ns differently.
func near(a, b int64) bool { return a-b <= 1000 && b-a <= 1000 }

// TestReorderAndDuplicates shuffles RTP packets within small windows and
// duplicates some (next to the original and far later): the output is
// identical to the clean run; reordered and duplicate packets are counted.
func TestReorderAndDuplicates(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	clean, _ := cleanRun(t, c)
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 2))
	for round := 0; round < testkit.Rounds(3); round++ {
		pkts := append([]replay.Packet(nil), c.pkts...)
		swaps, dups := 0, 0
		for i := 1; i+4 < len(pkts); i++ {
			if pkts[i].Kind == replay.RTP && rng.IntN(20) == 0 {
				j := i + 1 + rng.IntN(3)
				if pkts[j].Kind == replay.RTP {
					pkts[i], pkts[j] = pkts[j], pkts[i]
					swaps++
					// No chained swaps: a packet carried further than the
					// reorder buffer's max wait is lost, then late — the
					// documented result, but not this test's model.
					i = j
				}
			}
		}
		var out []replay.Packet
		for i, p := range pkts {
			out = append(out, p)
			if p.Kind == replay.RTP && rng.IntN(30) == 0 {
				out = append(out, p) // duplicate right away
				dups++
			}
			if i >= 40 && rng.IntN(50) == 0 && pkts[i-40].Kind == replay.RTP {
				old := pkts[i-40]
				old.Time = p.Time
				out = append(out, old) // duplicate long after
				dups++
			}
		}
		cfg := testConfig()
		sink := &recordSink{}
		d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
		feed(t, d, out)
		got := decodeAll(t, sink.snapshot())
		st := d.c.snapshot()
		if st.Reordered == 0 || st.Duplicates+st.Late != uint64(dups) || st.Lost != 0 {
			t.Fatalf("round %d: %d swaps %d dups: stats %+v", round, swaps, dups, st)
		}
		if len(got.frames) != len(clean.frames) || !bytes.Equal(got.stream, clean.stream) {
			t.Fatalf("round %d: output differs from clean run (%d vs %d frames)", round, len(got.frames), len(clean.frames))
		}
		for i := range got.frames {
			g, w := got.frames[i], clean.frames[i]
			if g.Key != w.Key || g.Size != w.Size || !near(g.PTS, w.PTS) {
				t.Fatalf("round %d: frame %d %+v vs %+v", round, i, got.frames[i], clean.frames[i])
			}
		}
		t.Logf("round %d: %d swaps, %d duplicates: reordered %d, duplicates %d, late %d", round, swaps, dups, st.Reordered, st.Duplicates, st.Late)
	}
}

// TestSSRCChange switches the capture to a new SSRC (and new sequence
// numbers) in the middle: the frame in progress is dropped, frames are
// skipped until the next keyframe, whose chunk carries the new SSRC and
// the discontinuity flag; until the new SSRC's first SR the times are
// estimated from arrival (here, the capture's own timestamps).
func TestSSRCChange(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	clean, _ := cleanRun(t, c)
	fidx := frameIndex(c.pkts)
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 3))
	at := len(c.pkts)/4 + rng.IntN(len(c.pkts)/2)
	for c.pkts[at].Kind != replay.RTP {
		at++
	}
	const newSSRC = 0x0badcafe
	pkts := make([]replay.Packet, len(c.pkts))
	for i, p := range c.pkts {
		p.Payload = append([]byte(nil), p.Payload...)
		if i >= at {
			if p.Kind == replay.RTP {
				binary.BigEndian.PutUint32(p.Payload[8:12], newSSRC)
				binary.BigEndian.PutUint16(p.Payload[2:4], binary.BigEndian.Uint16(p.Payload[2:4])+20000)
			} else {
				binary.BigEndian.PutUint32(p.Payload[4:8], newSSRC)
			}
		}
		pkts[i] = p
	}
	cfg := testConfig()
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, pkts)
	got := decodeAll(t, sink.snapshot())
	st := d.c.snapshot()
	// Expected: frames before the switched packet's frame; the frame it
	// cuts (if it started before) is dropped; then the next keyframe on.
	cut := fidx[at]
	midFrame := at > 0 && fidx[at-1] == cut
	next := cut
	if midFrame {
		next = cut + 1
	}
	for !clean.frames[next].Key {
		next++
	}
	want := cut + (len(clean.frames) - next)
	if st.SSRCChanges != 1 || len(got.frames) != want {
		t.Fatalf("switch at packet %d (frame %d, mid=%v): %d frames, want %d; stats %+v", at, cut, midFrame, len(got.frames), want, st)
	}
	var switched *Chunk
	var ev localstream.Event
	for i, ch := range got.chunks {
		if ch.SSRC == newSSRC {
			switched, ev = ch, got.events[i]
			break
		}
	}
	// Estimated unless the new SSRC's first sender report came while its
	// first chunk was still open: that chunk is then re-dated from the
	// report (docs/video.md; TestLateFirstReportRedatesChunk). Either way
	// its times are checked below.
	if switched == nil || !switched.Frames[0].Key || !ev.Flags.Has(localstream.FlagDiscontinuity) {
		t.Fatalf("first chunk of the new ssrc: %+v flags %b", switched, ev.Flags)
	}
	// Estimated times stay within the arrival jitter of the true PTS.
	for i := cut; i < len(got.frames); i++ {
		ref := clean.frames[next+i-cut]
		if d := got.frames[i].PTS - ref.PTS; d < -int64(50*time.Millisecond) || d > int64(50*time.Millisecond) {
			t.Fatalf("frame %d pts off by %s", i, time.Duration(d))
		}
	}
	t.Logf("switch at packet %d: %d frames out, dropped %d, skipped %d", at, len(got.frames), st.FramesDropped, st.FramesSkipped)
}

// TestMalformedPayloads corrupts the structure of random packets (FU
// header start/end bits, aggregation sizes, reserved packet types): each
// such frame is dropped (MalformedPayload), the stream resumes at the next
// keyframe flagged discontinuity, and every frame passed on is identical
// to the clean run's.
func TestMalformedPayloads(t *testing.T) {
	for _, name := range []string{"h264", "h265"} {
		t.Run(name, func(t *testing.T) {
			codec := map[string]Codec{"h264": CodecH264, "h265": CodecH265}[name]
			c := loadCapture(t, name, codec)
			clean, byPTS := cleanRun(t, c)
			rng := rand.New(rand.NewPCG(testkit.Seed(t), 5))
			pkts := make([]replay.Packet, len(c.pkts))
			corrupted := 0
			for i, p := range c.pkts {
				p.Payload = append([]byte(nil), p.Payload...)
				// At least one packet is corrupted whatever the seed (about 1 seed in 150
				// drew none in ~750 packets, and the test then failed on "0 corrupted").
				force := corrupted == 0 && i >= len(c.pkts)/2
				if p.Kind == replay.RTP && i > 20 && (rng.IntN(150) == 0 || force) {
					pl := p.Payload[12:]
					switch rng.IntN(3) {
					case 0: // reserved / unsupported packet type
						if codec == CodecH264 {
							pl[0] = pl[0]&0xe0 | 30
						} else {
							pl[0] = pl[0]&0x81 | 55<<1
						}
					case 1: // forbidden bit
						pl[0] |= 0x80
					case 2: // a fragment claiming to start a new NAL mid-way
						if codec == CodecH264 && pl[0]&0x1f == 28 {
							pl[1] = pl[1]&^0x40 | 0x80
						} else if codec == CodecH265 && (pl[0]>>1)&0x3f == 49 {
							pl[2] = pl[2]&^0x40 | 0x80
						} else {
							pl[0] |= 0x80
						}
					}
					corrupted++
				}
				pkts[i] = p
			}
			cfg := testConfig()
			cfg.PayloadTypes = map[uint8]Codec{96: codec}
			sink := &recordSink{}
			d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
			feed(t, d, pkts)
			got := decodeAll(t, sink.snapshot())
			st := d.c.snapshot()
			if corrupted == 0 || st.MalformedPayload == 0 || st.FramesDropped == 0 || st.Lost != 0 {
				t.Fatalf("%d corrupted: %+v", corrupted, st)
			}
			for i, f := range got.frames {
				if !bytes.Equal(got.data[i], byPTS[f.PTS]) {
					t.Fatalf("frame %d (pts %d) differs from the clean run", i, f.PTS)
				}
			}
			// After a dropped frame, nothing until a keyframe, in a flagged chunk.
			idx := map[int64]int{}
			for i, f := range clean.frames {
				idx[f.PTS] = i
			}
			prev := -1
			for ci, ch := range got.chunks {
				first := idx[ch.Frames[0].PTS]
				gap := ci == 0 || first != prev+1
				if gap != got.events[ci].Flags.Has(localstream.FlagDiscontinuity) || (gap && !ch.Frames[0].Key) {
					t.Fatalf("chunk %d: gap %v flags %b key %v", ci, gap, got.events[ci].Flags, ch.Frames[0].Key)
				}
				prev = idx[ch.Frames[len(ch.Frames)-1].PTS]
			}
			ffprobeDecodes(t, codec, got.stream, len(got.frames))
			t.Logf("%d packets corrupted: %d frames dropped, %d skipped, %d out", corrupted, st.FramesDropped, st.FramesSkipped, st.FramesOut)
		})
	}
}
