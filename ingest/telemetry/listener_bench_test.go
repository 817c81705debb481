package telemetry

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// benchEnv reads an int from the environment, else def.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchPublisherMain is the publishers' subprocess of BenchmarkListenIngest
// (child role "publisher"): EDGE_PUB_CONNS connections to EDGE_PUB_URL,
// EDGE_PUB_DRONES drones on each, EDGE_PUB_MSGS QoS 1 messages per drone,
// 64 in flight per drone. It connects, prints "ready", waits for a line on
// stdin, publishes, and exits 0 once every message is acked. In its own
// process, so that the benchmark's CPU is the ingester's alone.
func benchPublisherMain() int {
	url, prefix := os.Getenv("EDGE_PUB_URL"), os.Getenv("EDGE_PUB_PREFIX")
	conns, drones, msgs := benchEnv("EDGE_PUB_CONNS", 4), benchEnv("EDGE_PUB_DRONES", 2), benchEnv("EDGE_PUB_MSGS", 3000)
	var clients []paho.Client
	for i := range conns {
		o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("%s-pub-%d", prefix, i)).
			SetCleanSession(true).SetWriteTimeout(30 * time.Second).SetCustomOpenConnectionFn(dialBuffered)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			fmt.Fprintln(os.Stderr, "publisher: connect:", tok.Error())
			return 1
		}
		clients = append(clients, c)
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	payload := []byte(`{"drone":"dx","seq":1,"timestamp":1764428400123,"lat":48.1,"lon":11.5,"alt_m":100.5,"roll_deg":1.5,"pitch_deg":0.5,"yaw_deg":90,"speed_mps":12,"battery_pct":80,"mode":"AUTO"}`)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i, c := range clients {
		for d := range drones {
			topic := fmt.Sprintf("drones/%s-%d-%d/telemetry", prefix, i, d)
			wg.Go(func() {
				window := make(chan paho.Token, 64)
				settle := func(tok paho.Token) {
					if !tok.WaitTimeout(2*time.Minute) || tok.Error() != nil {
						failed.Store(true)
					}
				}
				for range msgs {
					if len(window) == cap(window) {
						settle(<-window)
					}
					window <- c.Publish(topic, 1, false, payload)
				}
				close(window)
				for tok := range window {
					settle(tok)
				}
			})
		}
	}
	wg.Wait()
	for _, c := range clients {
		c.Disconnect(100)
	}
	if failed.Load() {
		return 1
	}
	return 0
}

// cpuSelf is this process's user+system CPU time.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOf is a process's user+system CPU time from /proc (0 if unknown).
func cpuOf(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)          // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64)          // field 15
	return time.Duration(ut+st) * (time.Second / 100) // CLK_TCK = 100 on Linux
}

// benchPass is one measured pass: the rate and CPU per message of the
// ingester (and of the broker in front, if any).
type benchPass struct {
	rate                 float64
	ingestCPU, brokerCPU time.Duration // per message
}

// runBenchPass publishes through url (the listener or the broker) from the
// subprocess and measures until the ingester has appended every message.
func runBenchPass(b *testing.B, url, prefix string, in *Ingester, brokerPid int) benchPass {
	conns, drones, msgs := benchEnv("EDGE_BENCH_CONNS", 4), benchEnv("EDGE_BENCH_DRONES", 2), benchMsgs()
	total := uint64(conns * drones * msgs)
	cmd := testkit.ChildCommand("publisher", "EDGE_PUB_URL="+url, "EDGE_PUB_PREFIX="+prefix,
		fmt.Sprintf("EDGE_PUB_CONNS=%d", conns), fmt.Sprintf("EDGE_PUB_DRONES=%d", drones), fmt.Sprintf("EDGE_PUB_MSGS=%d", msgs))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		b.Fatalf("publisher: %q", line)
	}
	base := in.Stats().Appended
	cpu0, bcpu0, t0 := cpuSelf(), cpuOf(brokerPid), time.Now()
	stdin.Write([]byte("go\n"))
	deadline := t0.Add(3 * time.Minute)
	for in.Stats().Appended-base < total {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d appended", in.Stats().Appended-base, total)
		}
		time.Sleep(time.Millisecond) // polled every 1 ms, not testkit's 5: the elapsed time is the figure
	}
	el := time.Since(t0)
	p := benchPass{rate: float64(total) / el.Seconds(), ingestCPU: (cpuSelf() - cpu0) / time.Duration(total)}
	if brokerPid != 0 {
		p.brokerCPU = (cpuOf(brokerPid) - bcpu0) / time.Duration(total)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("publisher: %v", err)
	}
	return p
}

// BenchmarkListenIngest compares, in the same run, the same publishers
// (a subprocess: EDGE_BENCH_CONNS connections × EDGE_BENCH_DRONES drones,
// default 4 × 2, EDGE_BENCH_MSGS messages each, default 3000, QoS 1, 64 in
// flight per drone, ~190-byte JSON) publishing
//   - listen: straight to the ingester's listener, and
//   - broker: to a real Mosquitto that the ingester consumes (the existing
//     client path),
//
// both into a real fsync'd Badger store; a pass ends when the ingester has
// appended every message. Pairs alternate which goes first
// (EDGE_BENCH_PAIRS, default 5). Reported: the rates (means), the median
// per-pair ratio listen/broker, and CPU per message: the ingester's process
// (the benchmark's own: the publishers are elsewhere) on each path and
// Mosquitto's (broker path).
func BenchmarkListenIngest(b *testing.B) {
	br, err := broker.Start(context.Background(), broker.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Stop()
	s, st := openStore(b, b.TempDir())
	defer s.Close()
	cfg := testConfig(br.URL(), "bench-listen-agent")
	cfg.Listen = "127.0.0.1:0"
	in, err := New(cfg, Sink{Stream: st, Meta: s})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- in.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			b.Error(err)
		}
	}()
	select {
	case <-in.Subscribed():
	case <-time.After(30 * time.Second):
		b.Fatal("not subscribed")
	}
	listenURL := "tcp://" + in.ListenAddr().String()
	field := func(ps []benchPass, f func(benchPass) float64) []float64 {
		out := make([]float64, len(ps))
		for i, p := range ps {
			out[i] = f(p)
		}
		return out
	}
	rate := func(p benchPass) float64 { return p.rate }
	var listen, viaBroker []benchPass
	b.ResetTimer()
	for i := 0; i < b.N*benchPairs(); i++ {
		id := fmt.Sprintf("p%d", i)
		lp := func() { listen = append(listen, runBenchPass(b, listenURL, id+"l", in, 0)) }
		bp := func() { viaBroker = append(viaBroker, runBenchPass(b, br.URL(), id+"b", in, br.Pid())) }
		switch only := os.Getenv("EDGE_BENCH_ONLY"); { // listen: the listener path alone (profiling, allocs per message)
		case only == "listen":
			lp()
		case i%2 == 0:
			lp()
			bp()
		default:
			bp()
			lp()
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	if len(viaBroker) == 0 {
		b.ReportMetric(mean(field(listen, rate)), "listen_msgs/s")
		b.ReportMetric(median(field(listen, func(p benchPass) float64 { return us(p.ingestCPU) })), "listen_ingest_us/msg")
		return
	}

	ratios := make([]float64, len(listen))
	for i := range listen {
		ratios[i] = listen[i].rate / viaBroker[i].rate
	}
	b.ReportMetric(mean(field(listen, rate)), "listen_msgs/s")
	b.ReportMetric(mean(field(viaBroker, rate)), "broker_msgs/s")
	b.ReportMetric(median(ratios), "listen/broker")
	b.ReportMetric(median(field(listen, func(p benchPass) float64 { return us(p.ingestCPU) })), "listen_ingest_us/msg")
	b.ReportMetric(median(field(viaBroker, func(p benchPass) float64 { return us(p.ingestCPU) })), "broker_ingest_us/msg")
	b.ReportMetric(median(field(viaBroker, func(p benchPass) float64 { return us(p.brokerCPU) })), "mosquitto_us/msg")
}
