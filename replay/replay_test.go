package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/pion/rtcp"
)

func testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", name)
}

// TestReadPcapng converts the pcap capture to pcapng with pcapgo's writer
// and reads both: the same datagrams, times and endpoints come out.
func TestReadPcapng(t *testing.T) {
	f, err := os.Open(testdata("h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, r.LinkType())
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	a, skA, err := ReadFile(testdata("h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	b, skB, err := Read(&ng)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 1267 || len(a) != len(b) || skA != 0 || skB != 0 {
		t.Fatalf("pcap %d (%d skipped), pcapng %d (%d skipped)", len(a), skA, len(b), skB)
	}
	for i := range a {
		if !a[i].Time.Equal(b[i].Time) || a[i].Src != b[i].Src || a[i].Dst != b[i].Dst ||
			!bytes.Equal(a[i].Payload, b[i].Payload) || a[i].Kind != b[i].Kind {
			t.Fatalf("packet %d differs", i)
		}
	}
	kept, port, dropped := Select(a)
	if port != 5004 || len(kept) != 1267 || dropped != 0 {
		t.Fatalf("select: port %d kept %d dropped %d", port, len(kept), dropped)
	}
	if _, _, err := Read(bytes.NewReader([]byte("not a capture at all"))); !errors.Is(err, ErrFormat) {
		t.Fatalf("garbage file: %v", err)
	}
}

// listenPair binds UDP port P and P+1 on loopback.
func listenPair(t *testing.T) (*net.UDPConn, *net.UDPConn) {
	for i := 0; i < 50; i++ {
		a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: a.LocalAddr().(*net.UDPAddr).Port + 1})
		if err == nil {
			a.SetReadBuffer(8 << 20)
			return a, b
		}
		a.Close()
	}
	t.Fatal("no free port pair")
	return nil, nil
}

// datagrams keeps a copy of every datagram its conn reads, on a goroutine
// of its own, until the conn is closed. Tests wait on the count they expect
// rather than on a quiet spell: a loaded machine can delay the sender by
// longer than any fixed window.
type datagrams struct {
	mu  sync.Mutex
	got [][]byte // guarded by mu
}

func collect(t *testing.T, c *net.UDPConn) *datagrams {
	d := &datagrams{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			d.mu.Lock()
			d.got = append(d.got, append([]byte(nil), buf[:n]...))
			d.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return d
}

func (d *datagrams) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.got)
}

// wait returns the datagrams once n have arrived; it fails t if they have
// not within 30 s, or if more than n arrived.
func (d *datagrams) wait(t *testing.T, n int, what string) [][]byte {
	t.Helper()
	if !testkit.Until(30*time.Second, func() bool { return d.len() >= n }) {
		t.Fatalf("%s: received %d of %d datagrams", what, d.len(), n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.got) != n {
		t.Fatalf("%s: received %d datagrams, %d sent", what, len(d.got), n)
	}
	return d.got
}

// TestSend sends the capture as fast as possible, with the SSRC
// rewritten: RTP arrives on the port, RTCP on port+1, byte-identical but
// for the SSRC fields; with Mux everything arrives on the port.
func TestSend(t *testing.T) {
	pkts, _, err := ReadFile(testdata("h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	rtpC, rtcpC := listenPair(t)
	rtpGot, rtcpGot := collect(t, rtpC), collect(t, rtcpC)
	sum, err := Send(context.Background(), testdata("h264.pcap"), rtpC.LocalAddr().String(), Options{SSRC: 0xdeadbeef})
	if err != nil {
		t.Fatal(err)
	}
	if sum.RTP != 1265 || sum.RTCP != 2 || sum.RTCPMuxed || len(sum.SSRCs) != 1 || sum.SSRCs[0] != 0xdeadbeef {
		t.Fatalf("summary %+v", sum)
	}
	got := struct{ rtp, rtcp [][]byte }{rtpGot.wait(t, 1265, "rtp"), rtcpGot.wait(t, 2, "rtcp")}
	i := 0
	for _, p := range pkts {
		if p.Kind != RTP {
			continue
		}
		g := got.rtp[i]
		i++
		if binary.BigEndian.Uint32(g[8:12]) != 0xdeadbeef || !bytes.Equal(g[:8], p.Payload[:8]) || !bytes.Equal(g[12:], p.Payload[12:]) {
			t.Fatalf("rtp packet %d differs", i)
		}
	}
	for _, g := range got.rtcp {
		if g[1] != 200 || binary.BigEndian.Uint32(g[4:8]) != 0xdeadbeef {
			t.Fatalf("rtcp %x", g[:8])
		}
	}
	// Muxed: everything on the RTP port, nothing on port+1.
	muxC, muxRTCPC := listenPair(t)
	muxGot, muxRTCPGot := collect(t, muxC), collect(t, muxRTCPC)
	if _, err := Send(context.Background(), testdata("h264.pcap"), muxC.LocalAddr().String(), Options{Mux: true}); err != nil {
		t.Fatal(err)
	}
	muxGot.wait(t, 1267, "muxed")
	if n := muxRTCPGot.len(); n != 0 {
		t.Fatalf("muxed: %d datagrams on port+1", n)
	}
	if _, err := Send(context.Background(), testdata("h264.pcap"), "nowhere", Options{}); !errors.Is(err, ErrTarget) {
		t.Fatalf("bad target: %v", err)
	}
}

// TestSendTiming: with a speed factor, sending the first 0.5 s of the
// capture takes at least that span divided by the factor; a cancelled
// context stops the replay.
func TestSendTiming(t *testing.T) {
	all, _, err := ReadFile(testdata("h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	var pkts []Packet
	for _, p := range all {
		if p.Time.Sub(all[0].Time) <= 500*time.Millisecond {
			pkts = append(pkts, p)
		}
	}
	rtpC, rtcpC := listenPair(t)
	defer rtpC.Close()
	defer rtcpC.Close()
	sum, err := SendPackets(context.Background(), pkts, 5004, rtpC.LocalAddr().String(), Options{Speed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if min := sum.CaptureSpan / 2; sum.Elapsed < min-time.Millisecond || sum.CaptureSpan < 400*time.Millisecond {
		t.Fatalf("elapsed %s for span %s at speed 2", sum.Elapsed, sum.CaptureSpan)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Only packets due at once (the capture's first instant) may go out.
	atOnce := 0
	for _, p := range pkts {
		if p.Time.Sub(pkts[0].Time) < time.Millisecond {
			atOnce++
		}
	}
	if s, err := SendPackets(ctx, pkts, 5004, rtpC.LocalAddr().String(), Options{Speed: 1}); !errors.Is(err, context.Canceled) || s.Packets > atOnce {
		t.Fatalf("cancelled: %v, %d sent (%d due at once)", err, s.Packets, atOnce)
	}
}

// FuzzRead reads arbitrary bytes as a capture: no panic.
func FuzzRead(f *testing.F) {
	b, _ := os.ReadFile(testdata("h265.pcap"))
	f.Add(b[:4096])
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		pkts, _, _ := Read(bytes.NewReader(data))
		Select(pkts)
	})
}

// TestSendLive: with Live the sender reports' NTP clock reads the time of
// the replay, shifted by the same amount as the capture's own timing;
// without it, the capture's recorded clock.
func TestSendLive(t *testing.T) {
	pkts, _, err := ReadFile(testdata("h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	srNTP := func(live bool) []time.Time {
		rtpC, rtcpC := listenPair(t)
		defer rtpC.Close()
		rtcpGot := collect(t, rtcpC)
		sum, err := Send(context.Background(), testdata("h264.pcap"), rtpC.LocalAddr().String(), Options{Live: live})
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Time
		for _, b := range rtcpGot.wait(t, sum.RTCP, "rtcp") {
			ps, err := rtcp.Unmarshal(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if sr, ok := p.(*rtcp.SenderReport); ok {
					secs, frac := int64(sr.NTPTime>>32)-2208988800, int64(sr.NTPTime&0xffffffff)
					out = append(out, time.Unix(secs, frac*1e9>>32))
				}
			}
		}
		return out
	}
	recorded, live := srNTP(false), srNTP(true)
	if len(recorded) == 0 || len(recorded) != len(live) {
		t.Fatalf("%d recorded and %d live sender reports", len(recorded), len(live))
	}
	captured := pkts[0].Time
	if d := recorded[0].Sub(captured); d < -time.Minute || d > time.Minute {
		t.Fatalf("recorded SR clock %v is not the capture's %v", recorded[0], captured)
	}
	if d := time.Since(live[0]); d < -time.Second || d > 30*time.Second {
		t.Fatalf("live SR clock %v is not now", live[0])
	}
}
