package video

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// captureSeeds returns some real packets of a capture as fuzz seeds.
func captureSeeds(f *testing.F, name string, kind replay.Kind, n int) {
	all, _, err := replay.ReadFile(testdata(name + ".pcap"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range all {
		if p.Kind == kind && n > 0 {
			f.Add(p.Payload)
			n--
		}
	}
}

// FuzzRTPPath feeds arbitrary datagrams through the router and a drone's
// whole RTP/RTCP path: nothing may panic, and whatever is appended must
// decode as a chunk or a raw batch.
func FuzzRTPPath(f *testing.F) {
	captureSeeds(f, "h264", replay.RTP, 8)
	captureSeeds(f, "h264", replay.RTCP, 2)
	captureSeeds(f, "h265", replay.RTP, 8)
	f.Add([]byte{0x80, 0x60, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1})
	f.Add([]byte{0x80, 0xc8, 0, 6})
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := testConfig()
		cfg.PayloadTypes = map[uint8]Codec{96: CodecH264, 97: CodecH265}
		sink := &recordSink{}
		d := newDrone("f", &cfg, nil, sink, nil, time.Now, nil)
		ctx := context.Background()
		now := time.Unix(1_800_000_000, 0)
		// The datagram, then variants: as RTCP, and twice in sequence so
		// frames can complete.
		_ = d.rtp(ctx, append([]byte(nil), b...), now)
		_ = d.rtcpPacket(ctx, append([]byte(nil), b...), now)
		if len(b) >= 12 {
			c := append([]byte(nil), b...)
			binary.BigEndian.PutUint16(c[2:4], binary.BigEndian.Uint16(c[2:4])+1)
			c[1] |= 0x80
			_ = d.rtp(ctx, c, now)
		}
		_ = d.tick(ctx, now.Add(time.Hour))
		_ = d.close(ctx)
		for _, ev := range sink.snapshot() {
			if ev.Flags.Has(localstream.FlagRaw) {
				if _, err := DecodeRawBatch(ev.Payload); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := DecodeChunk(ev); err != nil {
				t.Fatal(err)
			}
		}
		rc := &receiveCounters{}
		r := newRouter(&cfg, rc, func(id string, dr *droneRun) {
			dr.d, dr.ch, dr.evict = newDrone(id, &cfg, dr.dc, sink, nil, time.Now, nil), make(chan item, 4), make(chan struct{})
		})
		if r.screen(b, netipLoopback) { // as the readers do
			r.dispatch(b, netipLoopback, now, false)
			r.dispatch(b, netipLoopback, now, true)
		}
	})
}

// fuzzDepacketizer checks one codec's depacketizer on arbitrary payloads:
// no panic, and every NAL it emits is non-empty and inside the input.
func fuzzDepacketizer(f *testing.F, codec Codec, name string) {
	all, _, _ := replay.ReadFile(testdata(name + ".pcap"))
	for i, p := range all {
		if p.Kind == replay.RTP && i < 40 {
			f.Add(p.Payload[12:], false)
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte, twice bool) {
		d := depacketizer{codec: codec}
		total := 0
		emit := func(nal []byte) {
			if len(nal) == 0 {
				t.Fatal("empty nal")
			}
			total += len(nal)
		}
		_ = d.push(payload, emit)
		if twice {
			_ = d.push(payload, emit)
		}
		if total > 2*len(payload)+4 {
			t.Fatalf("emitted %d bytes from %d", total, len(payload))
		}
		a := newAssembler(codec, 1<<20, &droneCounters{})
		a.addNAL(payload)
		_ = a.params.prefix(codec, 0)
	})
}

// FuzzH264Depacketizer fuzzes RFC 6184 single NAL, STAP-A and FU-A parsing.
func FuzzH264Depacketizer(f *testing.F) { fuzzDepacketizer(f, CodecH264, "h264") }

// FuzzH265Depacketizer fuzzes RFC 7798 single NAL, AP and FU parsing.
func FuzzH265Depacketizer(f *testing.F) { fuzzDepacketizer(f, CodecH265, "h265") }

// FuzzDecodeChunk decodes arbitrary stored chunk headers and payloads: a
// chunk that decodes must be self-consistent, and a chunk rendered by
// Event must decode back to itself.
func FuzzDecodeChunk(f *testing.F) {
	f.Add("h264", "0000abcd", "1,2,3", "3,2,1", "0", []byte("abcdef"), uint16(1))
	f.Add("h265", "ffffffff", "5", "4", "", []byte("abcd"), uint16(0))
	f.Add("h264", "1", "", "", "", []byte{}, uint16(1))
	f.Fuzz(func(t *testing.T, codec, ssrc, pts, sizes, keys string, payload []byte, flags uint16) {
		ev := localstream.Event{Flags: localstream.Flags(flags), Payload: payload, Headers: []localstream.Header{
			{Key: HeaderCodec, Value: codec}, {Key: HeaderSSRC, Value: ssrc},
			{Key: HeaderFramePTS, Value: pts}, {Key: HeaderFrameSizes, Value: sizes}, {Key: HeaderFrameKeys, Value: keys},
		}}
		c, err := DecodeChunk(ev)
		if err != nil {
			return
		}
		sum := 0
		for i, fr := range c.Frames {
			sum += fr.Size
			if len(c.FrameData(i)) != fr.Size {
				t.Fatal("frame data size")
			}
		}
		if sum != len(payload) {
			t.Fatalf("frames cover %d of %d", sum, len(payload))
		}
		back, err := DecodeChunk(c.Event("d", 0))
		if err != nil || len(back.Frames) != len(c.Frames) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range c.Frames {
			if back.Frames[i] != c.Frames[i] {
				t.Fatalf("frame %d: %+v vs %+v", i, back.Frames[i], c.Frames[i])
			}
		}
	})
}

// FuzzDecodeRawBatch decodes arbitrary raw batch payloads.
func FuzzDecodeRawBatch(f *testing.F) {
	var r rawBatch
	r.add([]byte{0x80, 1, 2, 3}, time.Unix(1, 2))
	r.add([]byte{}, time.Unix(3, 4))
	f.Add(r.buf)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 200})
	f.Fuzz(func(t *testing.T, p []byte) {
		pk, err := DecodeRawBatch(p)
		if err != nil {
			return
		}
		var r rawBatch
		for _, x := range pk {
			r.add(x.Data, time.Unix(0, x.Arrival))
		}
		if string(r.buf) != string(p) {
			t.Fatal("raw batch does not round-trip")
		}
	})
}
