package video

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/replay"
)

// spoofSR returns a sender report for ssrc with the given NTP and RTP times.
func spoofSR(ssrc uint32, ntp uint64, rtpTS uint32) []byte {
	b := make([]byte, 28)
	b[0], b[1] = 0x80, 200
	binary.BigEndian.PutUint16(b[2:4], 6)
	binary.BigEndian.PutUint32(b[4:8], ssrc)
	binary.BigEndian.PutUint64(b[8:16], ntp)
	binary.BigEndian.PutUint32(b[16:20], rtpTS)
	return b
}

// withSpoofedSRs inserts, every 20 packets once the capture's first report
// has been seen, a report for the capture's SSRC dated +1 h at a random RTP
// time, or at its arrival with an RTP time an hour off: each would date the
// frames after it an hour away from their arrival.
func withSpoofedSRs(pkts []replay.Packet, rng *rand.Rand) (out []replay.Packet, n int) {
	var ssrc uint32
	for _, p := range pkts {
		if p.Kind == replay.RTP {
			ssrc = binary.BigEndian.Uint32(p.Payload[8:12])
			break
		}
	}
	seenSR := false
	var lastTS uint32
	for i, p := range pkts {
		out = append(out, p)
		if p.Kind == replay.RTCP {
			seenSR = true
			continue
		}
		lastTS = binary.BigEndian.Uint32(p.Payload[4:8])
		if !seenSR || i%20 != 0 {
			continue
		}
		var b []byte
		if n%2 == 0 {
			b = spoofSR(ssrc, unixNanoToNTP(p.Time.Add(time.Hour).UnixNano()), rng.Uint32())
		} else {
			b = spoofSR(ssrc, unixNanoToNTP(p.Time.UnixNano()), lastTS+3600*90000)
		}
		out = append(out, replay.Packet{Time: p.Time, Kind: replay.RTCP, Payload: b})
		n++
	}
	return out, n
}

// TestSpoofedSenderReportsKeepGoodMapping: reports for a drone's SSRC that
// would date its frames an hour from their arrival — the NTP time an hour
// ahead with an arbitrary RTP time (which the old check judged the mapping
// in use by), or the arrival's NTP time with an RTP time an hour off — are
// ignored while the capture's own mapping dates the frames within the
// receiving clock's bound: every frame keeps the time of the real reports.
func TestSpoofedSenderReportsKeepGoodMapping(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	c := loadCapture(t, "h264", CodecH264)
	pkts, n := withSpoofedSRs(c.pkts, rng)
	if n < 4 {
		t.Fatalf("only %d spoofed reports inserted", n)
	}
	cfg := testConfig()
	cfg.MaxClockSkew = 10 * time.Second
	sink := &recordSink{}
	d := newDrone("d1", &cfg, nil, sink, nil, time.Now, nil)
	feed(t, d, pkts)
	st := d.c.snapshot()
	if st.SRSkewed != uint64(n) || st.ClockJumps != 0 {
		t.Fatalf("skewed reports %d (want %d), clock jumps %d", st.SRSkewed, n, st.ClockJumps)
	}
	checkFrames(t, c, decodeAll(t, sink.snapshot()), expectedPTS(c.pkts))
}

// spoofer sends, from its own socket, RTP packets and sender reports for
// ssrc to the agent's RTP and RTCP ports at about rate datagrams a second
// until stop is closed.
type spoofer struct {
	rtp, rtcp *net.UDPAddr
	ssrc      uint32
	rate      int
	sent      atomic.Int64
}

func (s *spoofer) run(t *testing.T, rng *rand.Rand, stop <-chan struct{}) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	pkt := make([]byte, 1200)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	per := s.rate / 100
	for i := 0; ; {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for j := 0; j < per; j, i = j+1, i+1 {
			if i%50 == 0 { // a report dated an hour ahead, to both ports
				sr := spoofSR(s.ssrc, unixNanoToNTP(time.Now().Add(time.Hour).UnixNano()), rng.Uint32())
				_, _ = conn.WriteToUDP(sr, s.rtcp)
				_, _ = conn.WriteToUDP(sr, s.rtp)
				s.sent.Add(2)
				continue
			}
			for k := range pkt {
				pkt[k] = byte(rng.Uint32())
			}
			pkt[0], pkt[1] = 0x80, 96|byte(rng.IntN(2))<<7
			binary.BigEndian.PutUint32(pkt[8:12], s.ssrc)
			_, _ = conn.WriteToUDP(pkt, s.rtp)
			s.sent.Add(1)
		}
	}
}

// TestUDPSpoofedSSRC: while a drone streams the capture, another socket
// on the same host sends 2,000 datagrams a second for the drone's SSRC —
// RTP with random sequence numbers, timestamps and payloads, and sender
// reports dated an hour ahead, to the RTP and the RTCP port. The SSRC is
// bound to the drone's source: the spoofed datagrams are counted and
// dropped, and the drone gets every frame at its true time.
func TestUDPSpoofedSSRC(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	c := loadCapture(t, "h264", CodecH264)
	sink := &recordSink{}
	cfg := NewDefaultConfig()
	cfg.MaxClockSkew = 10 * time.Second
	in, addr := startIngest(t, cfg, Sink{Stream: sink})
	ssrc := binary.BigEndian.Uint32(c.pkts[firstRTP(c.pkts)].Payload[8:12])
	sp := &spoofer{rtp: in.Addr().(*net.UDPAddr), rtcp: in.RTCPAddr().(*net.UDPAddr), ssrc: ssrc, rate: 2000}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The drone's first packets bind the SSRC; then the spoofer starts.
		for in.Stats().Drones == 0 {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
		sp.run(t, rng, stop)
	}()
	sum, err := replay.SendPackets(context.Background(), c.pkts, c.port, addr, replay.Options{Speed: 1})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(sum.Packets) + uint64(sp.sent.Load())
	testkit.WaitFor(t, 10*time.Second, "datagrams", func() bool { return in.Stats().Datagrams >= want })
	stopIngest(in)
	st := in.Stats()
	t.Logf("spoofer sent %d; stats: spoofed %d, sr skewed %d, ssrc changes %d, lost %d", sp.sent.Load(), st.Spoofed, st.SRSkewed, st.SSRCChanges, st.Lost)
	if sp.sent.Load() < 1000 {
		t.Fatalf("the spoofer sent only %d datagrams", sp.sent.Load())
	}
	if st.Spoofed != uint64(sp.sent.Load()) || st.Drones != 0 || st.DronesStarted != 1 {
		t.Fatalf("spoofed %d of %d sent; drones started %d", st.Spoofed, sp.sent.Load(), st.DronesStarted)
	}
	evs := byDrone(sink.snapshot())
	checkFramesAs(t, c, decodeAll(t, evs["ssrc-"+ssrcHex(c.pkts)]), expectedPTS(c.pkts), "ssrc-"+ssrcHex(c.pkts))
}

func firstRTP(pkts []replay.Packet) int {
	for i, p := range pkts {
		if p.Kind == replay.RTP {
			return i
		}
	}
	return -1
}

// TestUDPRebindAfterSilence: a drone that moves to another source port
// (a restarted sender keeping its SSRC, a NAT re-mapping) is spoofed to
// the router until the old source has been silent for rebind_after; then
// the new source takes the SSRC over (counted rebinds) and its frames are
// stored.
func TestUDPRebindAfterSilence(t *testing.T) {
	c := loadCapture(t, "h264", CodecH264)
	sink := &recordSink{}
	cfg := NewDefaultConfig()
	cfg.RTCPListen = "mux"
	cfg.RebindAfter = 300 * time.Millisecond
	in, addr := startIngest(t, cfg, Sink{Stream: sink})
	half := len(c.pkts) / 2
	if _, err := replay.SendPackets(context.Background(), c.pkts[:half], c.port, addr, replay.Options{Speed: 0, Mux: true}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "first half", func() bool { return in.Stats().Datagrams >= uint64(half) })
	time.Sleep(cfg.RebindAfter + 100*time.Millisecond) // the test's silence: longer than rebind_after
	sum, err := replay.SendPackets(context.Background(), c.pkts[half:], c.port, addr, replay.Options{Speed: 0, Mux: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "second half", func() bool { return in.Stats().Datagrams >= uint64(half+sum.Packets) })
	stopIngest(in)
	st := in.Stats()
	if st.Rebinds != 1 || st.Spoofed != 0 || st.DronesStarted != 1 {
		t.Fatalf("rebinds %d spoofed %d drones started %d", st.Rebinds, st.Spoofed, st.DronesStarted)
	}
	got := decodeAll(t, byDrone(sink.snapshot())["ssrc-"+ssrcHex(c.pkts)])
	if len(got.frames) != len(c.frames) {
		t.Fatalf("%d frames of %d", len(got.frames), len(c.frames))
	}
}
