package mavlink

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3"
	"github.com/bluenviron/gomavlib/v3/pkg/dialects/ardupilotmega"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// TestMain lets the test binary be the bench's sender (roles "sim" and
// "flood"), in its own process so that a pass's CPU is the receiver's alone.
func TestMain(m *testing.M) {
	sender := func(mode string) func() int {
		return func() int { return benchSenderMain(mode, os.Getenv("EDGE_MAVLINK_TO")) }
	}
	testkit.Main(m, map[string]func() int{"sim": sender("sim"), "flood": sender("flood")})
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchSenderMain: "sim" flies EDGE_MAVLINK_DRONES simulated drones (50
// frames/s each) over UDP for EDGE_MAVLINK_SECONDS; "flood" writes
// EDGE_MAVLINK_FRAMES frames of 20 drones over TCP as fast as it can. It
// prints "sent N".
func benchSenderMain(mode, to string) int {
	switch mode {
	case "sim":
		res, err := Simulate(context.Background(), SimConfig{To: "udp://" + to, Drones: benchEnv("EDGE_MAVLINK_DRONES", 20),
			Duration: time.Duration(benchEnv("EDGE_MAVLINK_SECONDS", 5)) * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("sent", res.Frames)
	case "flood":
		c, err := net.Dial("tcp", to)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		d := DefaultDialect()
		n := benchEnv("EDGE_MAVLINK_FRAMES", 100_000)
		w := bufio.NewWriterSize(c, 64<<10)
		var seq [21]uint8
		for i := range n {
			sys := uint8(1 + i%20)
			f, _ := d.Encode(false, seq[sys], sys, 1, sampleMessages(i / 20)[i%4])
			seq[sys]++
			w.Write(f)
		}
		w.Flush()
		c.Close()
		fmt.Println("sent", n)
	}
	return 0
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPass is one receiver's pass: events taken, frames sent, CPU and time.
type benchPass struct {
	events, sent int
	cpu, elapsed time.Duration
	commits      uint64 // store commits (intake only): events ÷ commits is the group commit's batch
}

// runSender runs the sender subprocess and returns how many frames it sent.
func runSender(b testing.TB, mode, to string) (int, time.Duration) {
	cmd := testkit.ChildCommand(mode, "EDGE_MAVLINK_TO="+to)
	cmd.Stderr = os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("sender: %v", err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(out), "sent ")))
	return n, time.Since(start)
}

// settle waits until count stops moving for 500 ms (or reaches want).
func settle(want int, count func() int) {
	last, since := -1, time.Now()
	for {
		c := count()
		if c >= want {
			return
		}
		if c != last {
			last, since = c, time.Now()
		} else if time.Since(since) > 500*time.Millisecond {
			return
		}
		time.Sleep(10 * time.Millisecond) // the poll of a wait on the count
	}
}

// intakePass runs the intake on the real store (Badger, fsync'd group
// commits) and watermark tracker of a telemetry stream.
func intakePass(b testing.TB, mode string) benchPass {
	s, err := localstream.Open(b.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st, _ := s.CreateStream("telemetry", localstream.StreamConfig{Scaling: localstream.ScalingPolicy{Type: localstream.ScaleFixed, MinSegments: 1}})
	tr, _ := watermark.NewTracker(st, s, watermark.Options{})
	cfg := localConfig()
	in, stop := runIntake(b, cfg, st, tr)
	defer stop()
	to := in.UDPAddr().String()
	if mode == "flood" {
		to = in.TCPAddr().String()
	}
	cpu0, start := cpuNow(), time.Now()
	sent, elapsed := runSender(b, mode, to)
	settle(sent, func() int { return int(in.Stats().Stored) })
	if mode == "flood" { // until the last is durable
		elapsed = time.Since(start)
	}
	return benchPass{events: int(in.Stats().Stored), sent: sent, cpu: cpuNow() - cpu0, elapsed: elapsed, commits: s.Stats().Commits}
}

// barePass is the peer: a gomavlib node (the library's own reader, with
// the dialect) that only counts the frames it reads.
func barePass(b testing.TB, mode string) benchPass {
	port := freeLocalPort(b)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var ep gomavlib.EndpointConf = gomavlib.EndpointUDPServer{Address: addr}
	if mode == "flood" {
		ep = gomavlib.EndpointTCPServer{Address: addr}
	}
	node := &gomavlib.Node{Endpoints: []gomavlib.EndpointConf{ep}, Dialect: ardupilotmega.Dialect,
		OutVersion: gomavlib.V2, OutSystemID: 254, HeartbeatDisable: true}
	if err := node.Initialize(); err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	counted := make(chan int, 1)
	count := 0
	done := make(chan struct{})
	go func() {
		for evt := range node.Events() {
			if _, ok := evt.(*gomavlib.EventFrame); ok {
				count++
				select {
				case <-counted:
				default:
				}
				counted <- count
			}
		}
		close(done)
	}()
	last := func() int {
		select {
		case c := <-counted:
			counted <- c
			return c
		default:
			return 0
		}
	}
	cpu0, start := cpuNow(), time.Now()
	sent, elapsed := runSender(b, mode, addr)
	settle(sent, last)
	if mode == "flood" {
		elapsed = time.Since(start)
	}
	return benchPass{events: last(), sent: sent, cpu: cpuNow() - cpu0, elapsed: elapsed}
}

func freeLocalPort(b testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// BenchmarkMAVLinkIntake: the intake (byte-exact frames into the durable
// telemetry stream, watermarks) against a bare gomavlib reader in the
// same run, alternating: (1) 20 simulated drones × 50 frames/s over UDP
// for EDGE_MAVLINK_SECONDS (5): events/s, loss, CPU per event; (2) a TCP
// flood of EDGE_MAVLINK_FRAMES (100 000): events/s at full speed.
func BenchmarkMAVLinkIntake(b *testing.B) {
	passes := benchEnv("EDGE_MAVLINK_PASSES", 2)
	for range b.N {
		for _, mode := range []string{"sim", "flood"} {
			var in, bare []benchPass
			for p := range passes {
				if p%2 == 0 {
					in, bare = append(in, intakePass(b, mode)), append(bare, barePass(b, mode))
				} else {
					bare, in = append(bare, barePass(b, mode)), append(in, intakePass(b, mode))
				}
			}
			report(b, mode, in, bare)
		}
	}
}

func report(b *testing.B, mode string, in, bare []benchPass) {
	sum := func(ps []benchPass) (ev, sent int, cpu, el time.Duration) {
		for _, p := range ps {
			ev, sent, cpu, el = ev+p.events, sent+p.sent, cpu+p.cpu, el+p.elapsed
		}
		return
	}
	iev, isent, icpu, iel := sum(in)
	bev, bsent, bcpu, bel := sum(bare)
	usPer := func(cpu time.Duration, ev int) float64 { return float64(cpu.Microseconds()) / float64(max(ev, 1)) }
	b.ReportMetric(100*float64(isent-iev)/float64(max(isent, 1)), mode+"_intake_loss_%")
	b.ReportMetric(100*float64(bsent-bev)/float64(max(bsent, 1)), mode+"_bare_loss_%")
	b.ReportMetric(usPer(icpu, iev), mode+"_intake_cpu_us/event")
	b.ReportMetric(usPer(bcpu, bev), mode+"_bare_cpu_us/event")
	b.ReportMetric(float64(iev)/iel.Seconds(), mode+"_intake_events/s")
	b.ReportMetric(float64(bev)/bel.Seconds(), mode+"_bare_events/s")
	b.ReportMetric((float64(iev)/iel.Seconds())/(float64(bev)/bel.Seconds()), mode+"_events_ratio")
	b.ReportMetric(usPer(bcpu, bev)/usPer(icpu, iev), mode+"_cpu_ratio_bare/intake")
	var commits uint64
	for _, p := range in {
		commits += p.commits
	}
	b.ReportMetric(float64(iev)/float64(max(commits, 1)), mode+"_intake_events/commit")
	b.Logf("%s: intake %d of %d events, %v CPU; bare gomavlib %d of %d, %v CPU", mode, iev, isent, icpu, bev, bsent, bcpu)
}
