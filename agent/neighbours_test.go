package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
)

// The hostile-neighbours run (issue 30): four good drones — telemetry
// through a real Mosquitto and on the agent's MQTT listener, two RTP video
// drones — stream for the whole run while one hostile neighbour after
// another does its worst (the phases below, in turn). In each phase the
// good drones' p99 ingest delay (publish to durable in the local stream)
// must stay under neighbourDelayBound when the lead-in shows a quiet
// machine (else add at most that to the lead-in's), and /healthz must
// tell the truth (the phase's reason while it lasts); over the run nothing the good
// drones sent is lost, duplicated or reordered, every video frame is
// stored, ffprobe decodes at least neighbourDecodeShare of them from the
// stored chunks, and the live heap and the RSS stay under
// neighbourLiveHeapBound and neighbourRSSBound.
//
// A phase is one entry of neighbourPhases: add a case by adding an entry
// (issue 30 cases 3 and 7 go here). EDGE_NEIGHBOUR_PHASE sets a phase's
// length (default 6 s); EDGE_NEIGHBOUR_ONLY runs only the phases whose
// names it lists (comma separated); EDGE_NEIGHBOUR_DUMP=<prefix> writes a
// goroutine dump and a heap profile 5 s into each phase (to find what a
// stall waits for). Figures: BENCHMARKS.md, "Hostile neighbours".

// neighbourDelayBound bounds the good drones' p99 ingest delay in a phase:
// the bound as it stands when the lead-in shows a quiet machine,
// else what a phase may add over the lead-in's p99 (same run).
const neighbourDelayBound = time.Second

// neighbourQuietLeadIn is the lead-in p99 up to which the machine counts
// as quiet (10–20 ms measured on an idle one) and a phase's p99 must stay
// under neighbourDelayBound flat.
const neighbourQuietLeadIn = 100 * time.Millisecond

// neighbourLiveHeapBound bounds the live heap (as of each GC, sampled
// every 100 ms) over the run: the agent plus the test's senders and
// readers. It follows from the intake's bounds with the defaults:
// telemetry holds at most telemetry.max_buffered_bytes (8 MiB) between
// the connections and the durable store, video ≤ 64 drones with a frame in
// assembly each, Badger's memtable arenas (64 MiB each, at most two here)
// and caches; measured ≈ 130 MiB. On main, four clients of 65,000-byte
// messages filled the lanes (4,096 × 64 KiB) and the store's queue (8,192
// more): the agent went from 24 MB to 830 MB.
const neighbourLiveHeapBound = 256 << 20

// neighbourRSSBound bounds the test process's resident set over the run
// (the agent, the senders and the readers): under a flood of 200 MB/s it
// allocates ~1 GB/s, so the GC's slack sets it, not what is held — with
// GOGC=100 at most twice the live heap — plus Badger's mapped memtable log
// (2 × 64 MiB). Measured 224 MiB with a live heap of 131 MiB; on main
// before issue 30 the agent alone reached 830 MB.
const neighbourRSSBound = 2*neighbourLiveHeapBound + 128<<20

// neighbourRig is what a phase gets: the running agent and its addresses.
type neighbourRig struct {
	a *Agent
	// brokerURL is the Mosquitto the agent subscribes to; listen is the
	// agent's MQTT listener (HOST:PORT), rtp its video port.
	brokerURL, listen, rtp string
	seed                   uint64
}

// neighbourPhase is one hostile neighbour.
type neighbourPhase struct {
	name string
	// attack runs the hostile client until stop is closed (or it is done).
	attack func(tb testing.TB, r *neighbourRig, stop <-chan struct{})
	// health is what /healthz must say (503, the body holding it) at some
	// time during the phase; "" = nothing asked. healthNot is what it
	// must never say during the phase ("" = nothing).
	health, healthNot string
	// check asserts that the attack happened and was handled as
	// documented, from the counters at the end of the phase.
	check func(tb testing.TB, r *neighbourRig, tel telemetry.Stats, vid video.Stats)
}

var neighbourPhases = []neighbourPhase{
	{
		// 30.1: one client publishes to more new drone ids than there
		// are slots, through the broker and on the listener.
		name: "new-drone-ids", attack: attackNewDroneIDs, health: "max_drones",
		check: func(tb testing.TB, r *neighbourRig, tel telemetry.Stats, _ video.Stats) {
			if tel.DronesOverLimit == 0 {
				tb.Fatalf("no new drone was refused: %+v", tel)
			}
		},
	},
	{
		// 30.2: another host holds hundreds of connections — CONNECTed
		// with keep-alive 0, and raw sockets that never CONNECT, reopened
		// as they close — while a drone connects fresh sessions.
		name: "idle-connections", attack: attackIdleConnections, health: "listener",
		check: func(tb testing.TB, r *neighbourRig, tel telemetry.Stats, _ video.Stats) {
			if tel.ListenerSourceRefused == 0 || tel.ListenerUnconnectedEvicted == 0 {
				tb.Fatalf("the listener's bounds never acted: %+v", tel)
			}
		},
	},
	{
		// 30.4: four clients on the listener send 65,000-byte QoS 1
		// messages as fast as TCP takes them, never waiting for an ack.
		// The byte budget holds their bytes; back-pressure is no outage.
		name: "big-messages", attack: attackBigMessages, healthNot: "stalled",
		check: func(tb testing.TB, r *neighbourRig, tel telemetry.Stats, _ video.Stats) {
			if tel.BudgetWaits == 0 {
				tb.Fatalf("the byte budget never filled: %+v", tel)
			}
		},
	},
}

func TestHostileNeighbours(t *testing.T) {
	phaseDur := 6 * time.Second
	if v, err := time.ParseDuration(os.Getenv("EDGE_NEIGHBOUR_PHASE")); err == nil && v > 0 {
		phaseDur = v
	}
	phases := neighbourPhases
	if only := os.Getenv("EDGE_NEIGHBOUR_ONLY"); only != "" {
		names := strings.Split(only, ",")
		phases = slices.DeleteFunc(slices.Clone(phases), func(p neighbourPhase) bool { return !slices.Contains(names, p.name) })
	}
	runNeighbours(t, phases, phaseDur)
}

// retainedFleet is the number of retained status messages at the broker
// before the agent starts: a fleet of more drones than max_drones (30.1).
const retainedFleet = 1100

func runNeighbours(tb testing.TB, phases []neighbourPhase, phaseDur time.Duration) {
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{Dir: tb.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	defer brk.Stop()
	if brk.Embedded() {
		tb.Log("mosquitto not installed: using the embedded broker")
	}
	publishRetainedFleet(tb, brk.URL(), retainedFleet)

	cfg := testConfig(nil, tb.TempDir(), brk.URL())
	cfg.Central.URL = "" // capture only: the intake is under test
	cfg.Telemetry.Listen = "127.0.0.1:0"
	cfg.Telemetry.DroneIdleTimeout = 4 * time.Second // below a phase: the next phase finds the slots free
	cfg.Video.Drones = []video.DroneConfig{{ID: goodVideoID(0x600d0001), SSRC: 0x600d0001}, {ID: goodVideoID(0x600d0002), SSRC: 0x600d0002}}
	a, cancel, done := startAgentLog(tb, cfg, slog.LevelWarn)
	stopAgent := stopOnce(tb, cancel, done)
	defer stopAgent()
	seed := uint64(time.Now().UnixNano())
	tb.Logf("seed=%d", seed)
	r := &neighbourRig{a: a, brokerURL: brk.URL(), listen: a.TelemetryListenAddr().String(), rtp: a.VideoAddr().String(), seed: seed}
	healthURL := "http://" + a.HTTPAddr() + "/healthz"
	if code, body := getHealth(healthURL); code != http.StatusOK {
		tb.Fatalf("/healthz %d before any attack: %s", code, body)
	}

	mem := startMemSampler()
	delays := newDelayLog(a.streams["telemetry"], func(rec localstream.Record) bool { return strings.HasPrefix(rec.RoutingKey, "good-") })

	// The good drones, for the whole run plus a lead-in and a tail.
	total := time.Duration(len(phases)+1)*phaseDur + 2*time.Second
	sims := make(chan simOutcome, 2)
	for _, g := range []struct{ url, prefix string }{{brk.URL(), "good-broker-"}, {"tcp://" + r.listen, "good-listen-"}} {
		go func() {
			res, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: g.url, Drones: 1, DronePrefix: g.prefix,
				ClientPrefix: g.prefix + "sim-", Rate: 20, Duration: total, Window: 1, NoStatus: true})
			sims <- simOutcome{res, err}
		}()
	}
	pkts := loadCapture(tb)
	goodVideo := []uint32{0x600d0001, 0x600d0002}
	loops := max(1, int(total/(6*time.Second)))
	videoErr := make(chan error, len(goodVideo))
	for _, ssrc := range goodVideo {
		go func() { videoErr <- sendLooped(r.rtp, pkts, ssrc, loops) }()
	}

	time.Sleep(phaseDur / 2) // lead-in: the good drones are running
	delays.phase("lead-in")
	for _, p := range phases {
		delays.phase(p.name)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { p.attack(tb, r, stop) })
		if f := os.Getenv("EDGE_NEIGHBOUR_DUMP"); f != "" {
			go func() {
				time.Sleep(5 * time.Second)
				out, _ := os.Create(f + "-" + p.name)
				pprof.Lookup("goroutine").WriteTo(out, 2)
				out.Close()
				out, _ = os.Create(f + "-" + p.name + ".heap")
				pprof.Lookup("heap").WriteTo(out, 0)
				out.Close()
			}()
		}
		var seen []string
		healthy := false
		for end := time.Now().Add(phaseDur); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			code, body := getHealth(healthURL)
			if code == http.StatusOK {
				healthy = true
			} else if !slices.Contains(seen, body) {
				seen = append(seen, body)
			}
		}
		close(stop)
		wg.Wait()
		if p.health != "" && !slices.ContainsFunc(seen, func(s string) bool { return strings.Contains(s, p.health) }) {
			tb.Errorf("phase %s: /healthz never said %q (healthy seen: %v; failures: %q)", p.name, p.health, healthy, seen)
		}
		if p.healthNot != "" && slices.ContainsFunc(seen, func(s string) bool { return strings.Contains(s, p.healthNot) }) {
			tb.Errorf("phase %s: /healthz said %q: %q", p.name, p.healthNot, seen)
		}
		if p.check != nil {
			p.check(tb, r, a.telem.Stats(), a.video.Stats())
		}
		tb.Logf("phase %s: /healthz failures %q", p.name, seen)
		tb.Logf("phase %s: telemetry %+v", p.name, a.telem.Stats())
	}
	delays.phase("tail")
	// (The reads below hold whole streams, the hostile messages too: the
	// run's memory is measured up to here.)
	rssPeak, livePeak := mem.stop()

	for range goodVideo {
		if err := <-videoErr; err != nil {
			tb.Fatal(err)
		}
	}
	want := map[string]uint64{}
	var published uint64
	for range 2 {
		o := <-sims
		if o.err != nil {
			tb.Fatalf("good drone: %v", o.err)
		}
		for name, d := range o.res.Drones {
			want[name] = d.LastSeq
		}
		published += o.res.Published
	}
	// Everything the good drones sent is stored.
	tel, vid := a.streams["telemetry"], a.streams["video"]
	var telRecs, vidRecs []localstream.Record
	for wait := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		telRecs, vidRecs = readStream(tb, tel), readStream(tb, vid)
		if goodTelemetryStored(telRecs) >= published && goodFrames(tb, vidRecs, goodVideo) >= 180*loops*len(goodVideo) || time.Now().After(wait) {
			break
		}
	}
	vs := a.video.Stats()
	stopAgent()
	delays.close()
	runtime.GC()
	debug.FreeOSMemory()

	var good []localstream.Record
	for _, rec := range telRecs {
		if strings.HasPrefix(rec.RoutingKey, "good-") {
			good = append(good, rec)
		}
	}
	if msg := verifySeqs(good, want); msg != "" {
		tb.Fatalf("good telemetry: %s", msg)
	}
	for _, ssrc := range goodVideo {
		id := goodVideoID(ssrc)
		ds := vs.PerDrone[id]
		if got := goodFrames(tb, vidRecs, []uint32{ssrc}); got != 180*loops || ds.FramesDropped != 0 || ds.Lost != 0 {
			tb.Fatalf("good video drone %s: %d frames stored of %d; dropped %d, lost %d, queue drops %d", id, got, 180*loops, ds.FramesDropped, ds.Lost, ds.QueueDrops)
		}
	}
	// The lead-in's p99 in the same run (no attack yet) says how loaded
	// the machine is: quiet (10–20 ms), a phase's p99 must stay under
	// neighbourDelayBound, the bound as stated; loaded by other
	// test binaries, the baseline itself is hundreds of ms, which no
	// attack caused, and the bound is what a phase adds to it.
	lead, _, _ := delays.p99("lead-in")
	bound := neighbourDelayBound
	if raceEnabled {
		// Under -race the hostile streams cost several times the CPU and
		// one broker session backs up behind them: the run looks for
		// races there, the timing bound is the normal build's.
		bound = 10 * neighbourDelayBound
	}
	limit, basis := lead+bound, fmt.Sprintf("the lead-in's %v + %v", lead, bound)
	if lead <= neighbourQuietLeadIn && !raceEnabled {
		limit, basis = bound, fmt.Sprintf("flat: the lead-in's %v shows a quiet machine", lead)
	}
	tb.Logf("phase bound: good telemetry p99 ingest delay under %v (%s)", limit, basis)
	for _, p := range append([]string{"lead-in"}, phaseNames(phases)...) {
		p99, n, maxD := delays.p99(p)
		tb.Logf("phase %s: good telemetry ingest delay p99 %v, max %v over %d messages", p, p99, maxD, n)
		for d := range want {
			p99, n, maxD := delays.p99(p + "/" + d)
			tb.Logf("  %s: p99 %v, max %v over %d", d, p99, maxD, n)
		}
		if n == 0 {
			tb.Errorf("phase %s: no good telemetry stored during it", p)
		} else if p != "lead-in" && p99 > limit {
			tb.Errorf("phase %s: good telemetry p99 ingest delay %v above %v (%s)", p, p99, limit, basis)
		}
	}
	tb.Logf("live heap peak %d MiB (bound %d MiB), RSS peak %d MiB (bound %d MiB)", livePeak>>20, neighbourLiveHeapBound>>20, rssPeak>>20, neighbourRSSBound>>20)
	if livePeak > neighbourLiveHeapBound {
		tb.Errorf("live heap peaked at %d MiB (bound %d MiB)", livePeak>>20, neighbourLiveHeapBound>>20)
	}
	if rssPeak > neighbourRSSBound {
		tb.Errorf("RSS peaked at %d MiB (bound %d MiB)", rssPeak>>20, neighbourRSSBound>>20)
	}
	// The good drones' video as a player sees it: each drone's stored
	// chunks, concatenated as `export video` writes them, decoded by
	// ffprobe; at least neighbourDecodeShare of the frames sent decode.
	for _, ssrc := range goodVideo {
		id := goodVideoID(ssrc)
		var clip []byte
		for _, rec := range vidRecs {
			if rec.RoutingKey == id && !rec.Flags.Has(localstream.FlagRaw) {
				clip = append(clip, rec.Payload...)
			}
		}
		n, errs, ok := ffprobeFrames(tb, clip)
		if !ok {
			tb.Skip("ffprobe not installed: every other check passed; the decode check (issue 30: ≥ 98 % of the good drones' frames) needs it")
		}
		sent := 180 * loops
		tb.Logf("good video drone %s: ffprobe decoded %d of %d frames sent (%.1f %%)%s", id, n, sent, 100*float64(n)/float64(sent), errs)
		if float64(n) < neighbourDecodeShare*float64(sent) {
			tb.Errorf("good video drone %s: ffprobe decoded %d of %d frames, below %.0f %%%s", id, n, sent, 100*neighbourDecodeShare, errs)
		}
	}
}

// neighbourDecodeShare is the share of the good drones' video frames that
// must decode (issue 30).
const neighbourDecodeShare = 0.98

// ffprobeFrames decodes an H.264 Annex-B stream with ffprobe and returns
// the frames it read and what it complained about; ok is false when
// ffprobe is not installed.
func ffprobeFrames(tb testing.TB, annexB []byte) (frames int, complaints string, ok bool) {
	tb.Helper()
	bin, err := exec.LookPath("ffprobe")
	if err != nil {
		return 0, "", false
	}
	f := filepath.Join(tb.TempDir(), "clip.h264")
	if err := os.WriteFile(f, annexB, 0o644); err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-v", "error", "-f", "h264", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", f)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("ffprobe: %v: %s", err, stderr.Bytes())
	}
	if frames, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
		tb.Fatalf("ffprobe printed %q: %v", out, err)
	}
	if stderr.Len() > 0 {
		complaints = "; ffprobe: " + strings.TrimSpace(stderr.String())
	}
	return frames, complaints, true
}

type simOutcome struct {
	res mqttsim.Result
	err error
}

func phaseNames(ps []neighbourPhase) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out
}

// getHealth returns /healthz's status code and body (code 0: no answer).
func getHealth(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// publishRetainedFleet leaves n retained status messages at the broker, as
// a fleet of n drones does.
func publishRetainedFleet(tb testing.TB, url string, n int) {
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("fleet-status"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	var toks []paho.Token
	for i := range n {
		status := "online"
		if i%3 == 0 {
			status = "offline"
		}
		toks = append(toks, c.Publish(fmt.Sprintf("drones/fleet-%d/status", i), 1, true, status))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			tb.Fatalf("retained status: %v", tok.Error())
		}
	}
}

// memSampler records the peak RSS and live heap.
type memSampler struct {
	rss, heap atomic.Uint64
	done      chan struct{}
	wg        sync.WaitGroup
}

func startMemSampler() *memSampler {
	m := &memSampler{done: make(chan struct{})}
	m.wg.Go(func() {
		for {
			rss, _ := memNow()
			maxAtomic(&m.rss, rss)
			maxAtomic(&m.heap, liveHeap())
			select {
			case <-m.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return m
}

// liveHeap is the heap that survived the last GC.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func (m *memSampler) stop() (rss, live uint64) {
	close(m.done)
	m.wg.Wait()
	return m.rss.Load(), m.heap.Load()
}

// delayLog tails the telemetry stream and records, per phase, each good
// message's ingest delay: when it became readable (durable) minus the
// publish time in its payload (the simulator's timestamp, Unix ms).
type delayLog struct {
	mu     sync.Mutex
	cur    string
	delays map[string][]time.Duration
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newDelayLog(st *localstream.Stream, good func(localstream.Record) bool) *delayLog {
	ctx, cancel := context.WithCancel(context.Background())
	d := &delayLog{delays: map[string][]time.Duration{}, cancel: cancel, cur: "lead-in"}
	rd, err := st.NewReader(st.TailCut(), nil)
	if err != nil {
		panic(err)
	}
	d.wg.Go(func() {
		defer rd.Close()
		for {
			rec, err := rd.Next(ctx)
			if err != nil {
				return
			}
			if !good(rec) {
				continue
			}
			var m mqttsim.Telemetry
			if json.Unmarshal(rec.Payload, &m) != nil {
				continue
			}
			delay := time.Since(time.UnixMilli(m.Timestamp))
			d.mu.Lock()
			d.delays[d.cur] = append(d.delays[d.cur], delay)
			d.delays[d.cur+"/"+rec.RoutingKey] = append(d.delays[d.cur+"/"+rec.RoutingKey], delay)
			d.mu.Unlock()
		}
	})
	return d
}

// phase starts recording under name.
func (d *delayLog) phase(name string) {
	d.mu.Lock()
	d.cur = name
	d.mu.Unlock()
}

func (d *delayLog) close() { d.cancel(); d.wg.Wait() }

// p99 returns the phase's 99th percentile, the count and the maximum.
func (d *delayLog) p99(name string) (p99 time.Duration, n int, maxD time.Duration) {
	d.mu.Lock()
	ds := slices.Clone(d.delays[name])
	d.mu.Unlock()
	p99, maxD = percentile99(ds)
	return p99, len(ds), maxD
}

// percentile99 returns the 99th percentile of ds and its maximum (0 for
// none), sorting ds.
func percentile99(ds []time.Duration) (p99, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[(len(ds)*99)/100], ds[len(ds)-1]
}

// attackNewDroneIDs (30.1): the attack, faster (there 1,025
// messages a minute were enough) — it is about ids, not bandwidth (a
// bandwidth flood of the broker session delays every drone behind it in
// the broker's queue, whatever the agent does). One client publishes ~30 KB QoS 0 messages to
// new drone ids, beyond max_drones, through the broker; another sends
// small QoS 1 messages to new ids on the listener, without waiting for
// acks (the refused ones never get one).
func attackNewDroneIDs(tb testing.TB, r *neighbourRig, stop <-chan struct{}) {
	big := []byte(`{"spam":"` + strings.Repeat("x", 30_000) + `"}`)
	var wg sync.WaitGroup
	for _, target := range []struct {
		url     string
		qos     byte
		payload []byte
	}{{r.brokerURL, 0, big}, {"tcp://" + r.listen, 1, []byte(`{"spam":true}`)}} {
		wg.Go(func() {
			c := paho.NewClient(paho.NewClientOptions().AddBroker(target.url).SetClientID(fmt.Sprintf("hostile-ids-%d", target.qos)).
				SetWriteTimeout(10 * time.Second))
			if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				tb.Errorf("hostile connect %s: %v", target.url, tok.Error())
				return
			}
			defer c.Disconnect(50)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tok := c.Publish(fmt.Sprintf("drones/hostile-%d-%d/telemetry", target.qos, i), target.qos, false, target.payload)
				if target.qos == 0 {
					tok.WaitTimeout(time.Second)
				}
				if i%16 == 15 {
					time.Sleep(25 * time.Millisecond) // ≤ 640 new ids a second from each: 1,100 within 2 s
				}
			}
		})
	}
	wg.Wait()
}

// dialFrom opens a TCP connection to addr from the local IP src (any 127/8
// address is this host's): another host on the ground station's network.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// mqttConnect encodes a clean CONNECT of client with keep-alive 0 (none).
func mqttConnect(client string) []byte {
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 4
	cp.ClientIdentifier, cp.CleanSession, cp.Keepalive = client, true, 0
	var b strings.Builder
	cp.Write(&b)
	return []byte(b.String())
}

// attackIdleConnections (30.2): from 127.0.0.2, 300 connections CONNECTed
// with keep-alive 0 and left silent; from ten addresses 127.0.0.10-19, raw
// sockets that never CONNECT, 200 a second. Meanwhile a good drone on
// 127.0.0.1 opens a fresh session every 200 ms: every one must connect.
func attackIdleConnections(tb testing.TB, r *neighbourRig, stop <-chan struct{}) {
	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 300; i++ {
			c, err := dialFrom("127.0.0.2", r.listen)
			if err != nil {
				continue
			}
			c.Write(mqttConnect(fmt.Sprintf("idle-%d", i)))
			keep(c)
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if c, err := dialFrom(fmt.Sprintf("127.0.0.%d", 10+i%10), r.listen); err == nil {
				keep(c)
			}
		}
	})
	attempts, failed := 0, 0
	var errs []string
	for i := 0; ; i++ {
		select {
		case <-stop:
			wg.Wait()
			tb.Logf("idle-connections: %d fresh sessions of a good drone, %d failed %q", attempts, failed, errs)
			if attempts == 0 || failed > 0 {
				tb.Errorf("idle-connections: %d of %d fresh sessions of a good drone failed: %q", failed, attempts, errs)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		attempts++
		c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + r.listen).SetClientID(fmt.Sprintf("good-probe-%d", i)).
			SetConnectTimeout(3 * time.Second).SetConnectRetry(false).SetAutoReconnect(false))
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			failed++
			errs = append(errs, fmt.Sprint(tok.Error()))
			continue
		}
		c.Disconnect(10)
	}
}

// attackBigMessages (30.4): four clients on the listener write 65,000-byte
// QoS 1 PUBLISHes as fast as TCP takes them, reading (and ignoring) the
// acks, never waiting for one.
func attackBigMessages(tb testing.TB, r *neighbourRig, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for k := range 4 {
		wg.Go(func() {
			c, err := dialFrom("127.0.0.4", r.listen)
			if err != nil {
				tb.Errorf("big-messages: %v", err)
				return
			}
			defer c.Close()
			go func() { <-stop; c.Close() }()
			c.Write(mqttConnect(fmt.Sprintf("hostile-big-%d", k)))
			go io.Copy(io.Discard, c)
			pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
			pub.Qos, pub.TopicName, pub.MessageID = 1, fmt.Sprintf("drones/hostile-big-%d/telemetry", k), 1
			pub.Payload = make([]byte, 65_000)
			var b strings.Builder
			pub.Write(&b)
			wire := []byte(b.String()) // one packet id over and over: a clean session keeps no dedup entries
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Write(wire); err != nil { // blocks while pushed back; closed at stop
					return
				}
			}
		})
	}
	wg.Wait()
}
