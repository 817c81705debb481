package video

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4"
	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/format"
	"github.com/pion/rtp"
	"golang.org/x/net/ipv4"

	"github.com/edge-agent/edge-agent/ingest/udpsock"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/replay"
)

// The benchmark's sender runs in a child process (this test binary re-run
// in role "sender", its spec in EDGE_VIDEO_BENCH_SENDER), so the CPU
// measured in the benchmark process is the receiving side's only.
const senderEnv = "EDGE_VIDEO_BENCH_SENDER"

func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"sender": func() int {
		if err := benchSender(os.Getenv(senderEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}})
}

// senderSpec is what the child process is asked to send.
type senderSpec struct {
	To       string        // RTP address
	Streams  int           // drones, SSRC 1..Streams
	Mbps     float64       // per stream; 0 = unpaced
	Duration time.Duration // how long
	// RTSP, when set, publishes stream i to the RTSP server at RTSP[i]
	// (ANNOUNCE, RECORD over TCP) instead of sending to To, RTP only
	// (the server makes its own sender reports), after Warmup.
	RTSP   []string
	Warmup time.Duration
}

// senderResult is what the child reports on stdout.
type senderResult struct {
	Packets int64
	Bytes   int64
	Errors  int64 // packets not published (RTSP)
	Elapsed time.Duration
}

// benchSender loops the H.264 capture as Streams drones (distinct SSRCs,
// sequence numbers and RTP/NTP times continuing across loops, RTCP muxed),
// each paced to Mbps, with sendmmsg batches.
func benchSender(spec string) error {
	var s senderSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return err
	}
	all, _, err := replay.ReadFile(testdata("h264.pcap"))
	if err != nil {
		return err
	}
	pkts, _, _ := replay.Select(all)
	t0 := pkts[0].Time
	span := pkts[len(pkts)-1].Time.Sub(t0) + 33*time.Millisecond
	var bits float64
	nRTP := 0
	var ts0, ts1 uint32
	for _, p := range pkts {
		bits += float64(8 * len(p.Payload))
		if p.Kind == replay.RTP {
			ts := binary.BigEndian.Uint32(p.Payload[4:8])
			if nRTP == 0 {
				ts0 = ts
			}
			ts1 = ts
			nRTP++
		}
	}
	tsSpan := ts1 - ts0 + 3000
	speed := 0.0
	if s.Mbps > 0 {
		speed = s.Mbps * 1e6 / (bits / span.Seconds())
	}
	var pc *ipv4.PacketConn
	var pubs []*rtspPublisher
	if len(s.RTSP) > 0 {
		s.Streams = len(s.RTSP)
		if pubs, err = startPublishers(s.RTSP); err != nil {
			return err
		}
		defer func() {
			for _, p := range pubs {
				p.c.Close()
			}
		}()
		time.Sleep(s.Warmup) // the sources play before the first packet (the parent checks they all do)
	} else {
		conn, err := net.Dial("udp4", s.To)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.(*net.UDPConn).SetWriteBuffer(8 << 20)
		pc = ipv4.NewPacketConn(conn.(*net.UDPConn))
	}
	type stream struct {
		next, loop int
		offset     time.Duration
	}
	streams := make([]stream, s.Streams)
	// Stream i starts at i/Streams of the capture, so keyframes (and
	// chunk appends) are spread out, and every stream sends from t=0.
	for i := range streams {
		at := time.Duration(float64(span) * float64(i) / float64(s.Streams))
		for streams[i].next < len(pkts)-1 && pkts[streams[i].next].Time.Sub(t0) < at {
			streams[i].next++
		}
		streams[i].offset = -pkts[streams[i].next].Time.Sub(t0)
	}
	const batch = 64
	msgs := make([]ipv4.Message, batch)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 1500)
	}
	var res senderResult
	start := time.Now()
	end := start.Add(s.Duration)
	for now := time.Now(); now.Before(end); now = time.Now() {
		n := 0
		flush := func() {
			if pubs != nil {
				n = 0 // written as they were made
				return
			}
			for off := 0; off < n; {
				k, err := pc.WriteBatch(msgs[off:n], 0)
				if err != nil {
					break // ENOBUFS / ECONNREFUSED: the datagram is lost, like on a network
				}
				off += k
			}
			n = 0
		}
		for i := range streams {
			st := &streams[i]
			for {
				p := pkts[st.next]
				if speed > 0 {
					due := time.Duration(float64(p.Time.Sub(t0)+time.Duration(st.loop)*span+st.offset) / speed)
					if start.Add(due).After(now) {
						break
					}
				}
				b := bufs[n][:len(p.Payload)]
				copy(b, p.Payload)
				rewrite(b, p.Kind, uint32(i+1), st.loop, nRTP, tsSpan, span)
				switch {
				case pubs == nil:
					msgs[n] = ipv4.Message{Buffers: [][]byte{b}}
					n++
					res.Packets++
					res.Bytes += int64(len(b))
				case p.Kind == replay.RTP:
					if err := pubs[i].write(b); err == nil {
						res.Packets++
						res.Bytes += int64(len(b))
					} else if res.Errors++; res.Errors == 1 {
						fmt.Fprintln(os.Stderr, "publish:", err)
					}
				}
				st.next++
				if st.next == len(pkts) {
					st.next, st.loop = 0, st.loop+1
				}
				if n == batch {
					flush()
				}
				if speed == 0 && st.next%16 == 0 {
					break
				}
			}
		}
		flush()
		if speed > 0 {
			time.Sleep(time.Millisecond) // paced at the spec's rate
		}
	}
	res.Elapsed = time.Since(start)
	if pubs != nil {
		time.Sleep(500 * time.Millisecond) // the clients' write queues drain before Close
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// rtspPublisher publishes one stream to an RTSP server (gortsplib's
// client: ANNOUNCE, SETUP over TCP, RECORD).
type rtspPublisher struct {
	c    *gortsplib.Client
	desc *description.Session
	pkt  rtp.Packet
}

func startPublishers(urls []string) ([]*rtspPublisher, error) {
	var out []*rtspPublisher
	for _, u := range urls {
		p := &rtspPublisher{
			c: &gortsplib.Client{Transport: ptr(gortsplib.TransportTCP), WriteQueueSize: 4096},
			desc: &description.Session{Medias: []*description.Media{{Type: description.MediaTypeVideo,
				Formats: []format.Format{&format.H264{PayloadTyp: 96, PacketizationMode: 1}}}}},
		}
		if err := p.c.StartRecording(u, p.desc); err != nil {
			return nil, fmt.Errorf("publish to %s: %w", u, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (p *rtspPublisher) write(b []byte) error {
	if err := p.pkt.Unmarshal(b); err != nil {
		return err
	}
	return p.c.WritePacketRTP(p.desc.Medias[0], &p.pkt)
}

// rewrite makes loop number loop of the capture continue the previous one.
func rewrite(b []byte, kind replay.Kind, ssrc uint32, loop, nRTP int, tsSpan uint32, span time.Duration) {
	if kind == replay.RTP {
		binary.BigEndian.PutUint32(b[8:12], ssrc)
		binary.BigEndian.PutUint16(b[2:4], binary.BigEndian.Uint16(b[2:4])+uint16(loop*nRTP))
		binary.BigEndian.PutUint32(b[4:8], binary.BigEndian.Uint32(b[4:8])+uint32(loop)*tsSpan)
		return
	}
	binary.BigEndian.PutUint32(b[4:8], ssrc)
	if b[1] == 200 && len(b) >= 20 {
		binary.BigEndian.PutUint64(b[8:16], binary.BigEndian.Uint64(b[8:16])+uint64(loop)*uint64(span.Seconds()*(1<<32)))
		binary.BigEndian.PutUint32(b[16:20], binary.BigEndian.Uint32(b[16:20])+uint32(loop)*tsSpan)
	}
}

// runSender starts the child sender and returns its result.
func runSender(b *testing.B, spec senderSpec) senderResult {
	js, _ := json.Marshal(spec)
	cmd := testkit.ChildCommand("sender", senderEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("sender: %v", err)
	}
	var res senderResult
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("sender output %q: %v", out, err)
	}
	return res
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchDuration is how long each measurement streams (EDGE_BENCH_SECONDS, default 4).
func benchDuration() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("EDGE_BENCH_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 4 * time.Second
}

// settledStats are the ingest's stats once its datagram and packet counts
// held still for 200 ms (at most 10 s): what is still on its way is read.
func settledStats(in *Ingest) (s Stats) {
	testkit.Settle(200*time.Millisecond, 10*time.Second, func() uint64 { s = in.Stats(); return s.Packets + s.Datagrams })
	return s
}

// report sets the benchmark's metrics for one measurement.
func report(b *testing.B, res senderResult, received uint64, cpu time.Duration) {
	loss := 100 * (1 - float64(received)/float64(res.Packets))
	mbps := float64(res.Bytes) * 8 / res.Elapsed.Seconds() / 1e6
	rx := mbps * float64(received) / float64(res.Packets)
	b.ReportMetric(mbps, "tx_Mbit/s")
	b.ReportMetric(rx, "rx_Mbit/s")
	b.ReportMetric(loss, "loss%")
	b.ReportMetric(100*cpu.Seconds()/res.Elapsed.Seconds(), "cpu%")
	b.ReportMetric(100*cpu.Seconds()/res.Elapsed.Seconds()/rx, "cpu%/Mbit/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkVideoIngest streams N drones of 6 Mbit/s each (the H.265-free
// H.264 capture looped, paced) over loopback, side by side into
//   - bare: a socket read with recvmmsg, no parsing, no storage (ceiling);
//   - ingest: the Ingest appending to a real Store (Badger, fsync'd);
//
// and reports received Mbit/s, loss %, and the receiving process's CPU.
// The "max" cases send unpaced to find each side's ceiling.
func BenchmarkVideoIngest(b *testing.B) {
	for _, n := range []int{25, 50, 75, 100} {
		for _, mode := range []string{"bare", "ingest"} {
			b.Run(fmt.Sprintf("streams=%d/%s", n, mode), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					benchOnce(b, mode, senderSpec{Streams: n, Mbps: 6, Duration: benchDuration()})
				}
			})
		}
	}
	for _, mode := range []string{"bare", "ingest"} {
		b.Run("max/"+mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchOnce(b, mode, senderSpec{Streams: 50, Duration: benchDuration()})
			}
		})
	}
}

func benchOnce(b *testing.B, mode string, spec senderSpec) {
	if mode == "bare" {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		udpsock.Tune(conn, 16<<20)
		var got atomic.Uint64
		done := make(chan struct{})
		go func() {
			defer close(done)
			pc := ipv4.NewPacketConn(conn)
			msgs := make([]ipv4.Message, 64)
			for i := range msgs {
				msgs[i].Buffers = [][]byte{make([]byte, 9001)}
			}
			for {
				n, err := pc.ReadBatch(msgs, 0)
				if err != nil {
					return
				}
				got.Add(uint64(n))
			}
		}()
		spec.To = conn.LocalAddr().String()
		c0 := cpuTime()
		res := runSender(b, spec)
		testkit.Settle(200*time.Millisecond, 10*time.Second, got.Load) // the tail read
		cpu := cpuTime() - c0
		conn.Close()
		<-done
		report(b, res, got.Load(), cpu)
		return
	}
	store, st := benchStore(b)
	defer store.Close()
	cfg := NewDefaultConfig()
	cfg.Listen, cfg.RTCPListen, cfg.MaxDrones = "127.0.0.1:0", "mux", 128
	in, stop := runBenchIngest(b, cfg, st)
	spec.To = in.Addr().String()
	c0 := cpuTime()
	res := runSender(b, spec)
	// Let the drones work off their queues: loss is what never reaches
	// them (kernel and queue drops), not what is still queued.
	s := settledStats(in)
	cpu := cpuTime() - c0
	stop()
	report(b, res, s.Packets+s.RTCP, cpu)
	b.ReportMetric(float64(s.Chunks)/res.Elapsed.Seconds(), "chunks/s")
	b.ReportMetric(float64(s.FramesOut)/res.Elapsed.Seconds(), "frames/s")
	if s.AppendErrors > 0 {
		b.Logf("append errors: %d", s.AppendErrors)
	}
	b.Logf("%d streams: sent %d, drones got %d (kernel drops %d, queue drops %d, lost %d), chunks %d, frames %d",
		spec.Streams, res.Packets, s.Packets+s.RTCP, s.KernelDrops, s.QueueDrops, s.Lost, s.Chunks, s.FramesOut)
}
