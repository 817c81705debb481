package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"
	"github.com/bluenviron/gortsplib/v4/pkg/base"
	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/pion/rtp"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/ingest/video/rtsptest"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// The good drones of the run of every intake at once, one an intake.
const (
	goodMQTT   = "good-mqtt-1" // mqttsim's first drone of prefix good-mqtt-
	goodMavUDP = "good-mav-udp"
	goodMavTCP = "good-mav-tcp"
	goodRTP    = "good-rtp"
	goodCam    = "good-cam"
	goodSSRC   = 0x600d0003
	// goodMQTTRate is the good MQTT drone's messages a second, and
	// goodMQTTWindow its QoS 1 publishes in flight: Mosquitto's default
	// (max_inflight_messages 20). With one in flight a drone sends one
	// message per durable round trip: on a starved machine (a round trip
	// of 0.3–1 s) it fell 5–10 s behind its 20 a second, nothing lost —
	// its own limit, which mqttDue would count against the agent.
	goodMQTTRate, goodMQTTWindow = 20, 20
	// The hostile drones whose own streams come reordered with late
	// copies: a MAVLink system id and an RTP SSRC, both configured.
	reorderMav  = "hostile-mav-reorder"
	reorderSSRC = 0xbad0bad0
	// machineProbe is probeMachine's pipe, logged beside the drones.
	machineProbe = "machine-probe"
)

// TestHostileEveryIntake (issue 37, "a hostile run per intake at once"):
// one agent runs every intake — the MQTT listener, MAVLink over UDP and
// TCP, RTP push and RTSP pull — with a good drone on each (an MQTT drone,
// a MAVLink UDP drone, a MAVLink TCP drone, an RTP video drone and a
// well-behaved RTSP camera) sending numbered messages, frames and video
// frames. After a lead-in every intake is attacked at once for
// attackFor, from a process of its own (TestHostileAttackers), as from
// another host:
//
//   - MQTT listener: idle connections (CONNECTed with keep-alive 0 and
//     raw sockets that never CONNECT) while a drone opens fresh sessions
//     (attackIdleConnections), new drone ids beyond max_drones, QoS 1
//     resends (DUP) of a persistent session: late copies;
//   - MAVLink: idle TCP connections holding every slot before the good
//     TCP drone dials, garbage datagrams, frames of ever new system ids,
//     the good drones' system ids from another source, and a drone whose
//     frames come reordered with late copies;
//   - RTP: garbage, SSRCs that pass probation one after another, the good
//     drone's SSRC from another source, and a drone whose packets come
//     reordered with late copies;
//   - RTSP: a camera that redirects to itself and one that accepts PLAY
//     and closes, beside the good camera.
//
// Nothing a good drone sent is lost, repeated or reordered in the local
// store; each attack shows in the agent's counters; and the good drones'
// p99 ingest delay during the attack — from the send of a message, frame
// or a chunk's last video frame to its being readable in the local
// store — stays under neighbourDelayBound more than a machine probe's
// p99 over the same attack (probeMachine: what the machine alone cost a
// record then). Figures: docs/benchmarks/hostile.md.
func TestHostileEveryIntake(t *testing.T) {
	const leadIn, attackFor, tail = 3 * time.Second, 12 * time.Second, time.Second
	good := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.Playing)
	var loop *rtsptest.Camera
	loop = rtsptest.StartCamera(t, "127.0.0.1", rtsptest.RedirectTo(func() string { return loop.URL("", "cam") }))
	flap := rtsptest.StartCamera(t, "127.0.0.1", rtsptest.PlayThenClose)
	g := newGoodLog()
	good.Stream(func(i int, at time.Time) { g.sent(goodCam, i, at) })

	cfg := testConfig(t, t.TempDir(), "")
	cfg.Central.URL = "" // capture only: the intakes are under test
	cfg.Telemetry.Listen = "127.0.0.1:0"
	cfg.Telemetry.MaxDrones = 64
	cfg.MAVLink.Enabled = true
	cfg.MAVLink.UDPListen, cfg.MAVLink.TCPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.MAVLink.Drones = map[uint8]string{1: goodMavUDP, 2: goodMavTCP, 3: reorderMav}
	cfg.MAVLink.MaxDrones, cfg.MAVLink.MaxConnections = 8, 8
	cfg.Video.MaxDrones = 8
	cfg.Video.Drones = []video.DroneConfig{{ID: goodRTP, SSRC: goodSSRC}, {ID: "hostile-rtp-reorder", SSRC: reorderSSRC}}
	cfg.Video.Sources = []video.SourceConfig{
		{URL: good.URL("", "cam"), Drone: goodCam, Transport: "tcp"},
		{URL: loop.URL("", "cam"), Drone: "hostile-cam-loop", Transport: "tcp"},
		{URL: flap.URL("", "cam"), Drone: "hostile-cam-flap", Transport: "tcp"},
	}
	a, cancel, done := startAgent(t, cfg)
	stopAgent := stopOnce(t, cancel, done)
	defer stopAgent()
	tails := g.tail(t, a.streams["telemetry"], a.streams["video"])
	defer tails()
	stopProbe := probeMachine(t, g, cfg.DataDir)
	defer stopProbe()
	listen := a.TelemetryListenAddr().String()
	mavUDP, mavTCP, rtpAddr := a.MAVLinkUDPAddr().String(), a.MAVLinkTCPAddr().String(), a.VideoAddr().String()
	seed := testkit.Seed(t)

	attackFrom, attackTo := g.phases(time.Now().Add(leadIn), attackFor)
	end := attackTo.Add(tail)
	var goods sync.WaitGroup
	var sim mqttsim.Result
	goods.Go(func() {
		var err error
		sim, err = mqttsim.Simulate(t.Context(), mqttsim.Config{Broker: "tcp://" + listen, Drones: 1, DronePrefix: "good-mqtt-",
			ClientPrefix: "good-mqtt-sim-", Rate: goodMQTTRate, Duration: time.Until(end), Window: goodMQTTWindow, NoStatus: true})
		if err != nil {
			t.Errorf("good MQTT drone: %v", err)
		}
	})
	goods.Go(func() { sendGoodMAVLinkUDP(t, g, mavUDP, end) })
	tcpUp := make(chan struct{})
	goods.Go(func() { sendGoodMAVLinkTCP(t, g, mavTCP, attackFrom.Add(2500*time.Millisecond), end, tcpUp) })
	goods.Go(func() { sendGoodRTP(t, g, rtpAddr, end) })

	attackers := startAttackers(t, attackTargets{Listen: listen, MAVUDP: mavUDP, MAVTCP: mavTCP, RTP: rtpAddr,
		MAVTCPIdle: cfg.MAVLink.MaxConnections + 4, Seed: seed})
	time.Sleep(time.Until(attackFrom))
	cpu0, wait0, _ := schedStat()
	rt0 := readRuntime()
	attackers.start(tcpUp)
	time.Sleep(time.Until(attackTo))
	cpu1, wait1, _ := schedStat()
	rt1 := readRuntime()
	attackers.stop()
	goods.Wait()
	cams := a.video.Stats().Sources // the misbehaving cameras' sessions, as of the attack's end
	loopConns, flapPlays := loop.Conns.Load(), len(flap.Of(base.Play))
	sent := g.counts()
	sent[goodMQTT] = int(sim.Drones[goodMQTT].LastSeq)
	t.Logf("good drones sent %v", sent)

	if !testkit.UntilEvery(60*time.Second, 100*time.Millisecond, func() bool { return g.storedAll(sent) }) {
		t.Errorf("after 60 s the good drones' stored records are %v of %v", g.storedCounts(), sent)
	}
	tel, mav, vid := a.telem.Stats(), a.mavlink.Stats(), a.video.Stats()
	stopAgent()

	// Nothing lost, repeated or reordered: each good drone's indices, in
	// store order, are 0, 1, 2, … up to what it sent (the camera, which
	// streams on, may have more).
	for drone, n := range sent {
		if msg := g.check(drone, n, drone == goodCam); msg != "" {
			t.Errorf("good drone %s: %s", drone, msg)
		}
	}
	// Every attack happened and was turned away, counted.
	ud, _ := mav.Drone(1)
	td, _ := mav.Drone(2)
	rd, _ := mav.Drone(3)
	gv, rv := vid.PerDrone[goodRTP], vid.PerDrone["hostile-rtp-reorder"]
	proofs := []struct {
		what string
		ok   bool
		got  any
	}{
		{"MQTT listener: idle connections refused and evicted", tel.ListenerSourceRefused > 0 && tel.ListenerUnconnectedEvicted > 0,
			[]uint64{tel.ListenerSourceRefused, tel.ListenerUnconnectedEvicted}},
		{"MQTT listener: new drone ids refused", tel.DronesOverLimit > 0, tel.DronesOverLimit},
		{"MQTT listener: resends skipped", tel.DuplicatesSkipped > 0, tel.DuplicatesSkipped},
		{"MAVLink TCP: idle connections refused and evicted", mav.ConnectionsRefused > 0 && mav.ConnectionsEvicted > 0,
			[]uint64{mav.ConnectionsRefused, mav.ConnectionsEvicted}},
		{"MAVLink UDP: garbage skipped", mav.GarbageBytes > 0, mav.GarbageBytes},
		{"MAVLink UDP: new system ids refused", mav.DronesOverLimit > 0, mav.DronesOverLimit},
		{"MAVLink: the good drones' system ids spoofed", ud.Spoofed > 0 && td.Spoofed > 0, []uint64{ud.Spoofed, td.Spoofed}},
		{"MAVLink: late copies dropped", rd.Duplicates > 0, rd.Duplicates},
		{"RTP: garbage dropped", vid.NotRTP > 0, vid.NotRTP},
		{"RTP: SSRC churn refused or evicted", vid.TooManyDrones+vid.Evicted > 0, []uint64{vid.TooManyDrones, vid.Evicted}},
		{"RTP: the good drone's SSRC spoofed", gv.Spoofed > 0, gv.Spoofed},
		{"RTP: reordered and late copies", rv.Reordered > 0 && rv.Duplicates > 0, []uint64{rv.Reordered, rv.Duplicates}},
	}
	for _, p := range proofs {
		t.Logf("%s: %v", p.what, p.got)
		if !p.ok {
			t.Errorf("the attack did not happen as planned: %s: %v", p.what, p.got)
		}
	}
	// The misbehaving cameras: bounded redirects and backoff.
	for _, s := range cams {
		t.Logf("RTSP source %s: %s, %d attempts, %d connects, last error %q", s.Drone, s.State, s.Attempts, s.Connects, s.LastError)
		switch s.Drone {
		case goodCam:
			if s.Connects != 1 || s.Reconnects != 0 {
				t.Errorf("the good camera's session was not steady: %+v", s)
			}
		case "hostile-cam-loop":
			if s.Attempts < 2 || !strings.Contains(s.LastError, "too many RTSP redirects") || loopConns > int64(5*(s.Attempts+1)) {
				t.Errorf("the redirecting camera: %d connections in %d attempts, last error %q", loopConns, s.Attempts, s.LastError)
			}
		case "hostile-cam-flap":
			// The backoff doubles from 250 ms to 5 s: 6 sessions in 13 s.
			if flapPlays < 2 || flapPlays > 10 || s.LastError == "" {
				t.Errorf("the camera that closes after PLAY: %d sessions in %v, last error %q", flapPlays, leadIn+attackFor, s.LastError)
			}
		}
	}
	t.Logf("RTSP: the redirecting camera got %d connections, the flapping one %d sessions", loopConns, flapPlays)
	t.Logf("kernel drops: MAVLink %d, video %d", mav.KernelDrops, vid.KernelDrops)

	// The good drones' ingest delay. Other test binaries share the
	// machine (make test): a starved process or a slow disk delays every
	// record, the agent's or not. The machine probe, a pipe of a
	// record's shape that the agent does not touch (a socket read, two
	// handoffs and an fsync, in the same process and on the same disk),
	// measures that at the same moments: each good
	// drone's p99 under attack must stay under neighbourDelayBound more
	// than the probe's p99 over the attack. An additive allowance: a
	// stall of the agent's own (a lock held, a queue behind attack
	// traffic) adds its length to the drone's delay and nothing to the
	// probe's, so one of more than neighbourDelayBound fails however
	// loaded the machine (docs/benchmarks/hostile.md: a 1.5 s stall
	// injected in the MAVLink intake and in the store's commit loop
	// fails the test, quiet and loaded).
	probe99, probeN, _ := g.p99("attack", machineProbe)
	if probeN < int(attackFor/(100*time.Millisecond)) {
		t.Errorf("the machine probe measured %d times during the %v attack: no measure of the machine", probeN, attackFor)
	}
	limit := neighbourDelayBound + probe99
	basis := fmt.Sprintf("%v + the machine probe's p99 %v", neighbourDelayBound, probe99)
	if raceEnabled {
		limit, basis = 10*neighbourDelayBound+probe99, basis+"; 10 s under -race, which looks for races: the timing bound is the normal build's"
	}
	// Context, not the bound: the process's CPU, its threads' run-queue
	// wait (a thread waiting is not always a record waiting: at a share
	// of 0.25 the good drones' p99 was as quiet as at 0.57), the runtime's
	// scheduling and GC.
	t.Logf("the test process: %v of CPU and %v waiting for one during the %v attack", cpu1-cpu0, wait1-wait0, attackFor)
	t.Logf("the Go runtime during the attack: %s", rt1.since(rt0))
	for _, phase := range []string{"lead-in", "attack"} {
		p99, n, maxD := g.p99(phase, machineProbe)
		w := g.slowest(phase, machineProbe)
		t.Logf("%s: the machine probe (UDP read, write and fsync, three goroutines): p99 %v, max %v over %d; the slowest sent at %v of the attack",
			phase, p99, maxD, n, w.at.Round(time.Millisecond))
	}
	t.Logf("bound: each good drone's p99 ingest delay under attack below %v (%s)", limit, basis)
	for _, phase := range []string{"lead-in", "attack"} {
		p99, n, maxD := g.p99(phase, "")
		t.Logf("%s: good drones' ingest delay p99 %v, max %v over %d records", phase, p99, maxD, n)
		for _, d := range []string{goodMQTT, goodMavUDP, goodMavTCP, goodRTP, goodCam} {
			p99, n, maxD := g.p99(phase, d)
			in99, _, _ := g.p99(phase, d+"/intake")
			st99, _, _ := g.p99(phase, d+"/store")
			w := g.slowest(phase, d)
			t.Logf("  %s: p99 %v (intake %v, store %v), max %v over %d; the slowest sent at %v of the attack: intake %v, store %v",
				d, p99, in99, st99, maxD, n, w.at.Round(time.Millisecond), w.intake, w.store)
			if phase == "attack" && (n == 0 || p99 > limit) {
				t.Errorf("good drone %s under attack: ingest delay p99 %v over %d records, bound %v (%s)", d, p99, n, limit, basis)
			}
		}
	}
}

// goodLog records what the good drones sent (each message's index and
// send time; the MAVLink frames' bytes) and, tailing the local streams,
// what was stored: each drone's indices in store order and each
// record's ingest delay by phase of its send time.
type goodLog struct {
	mu sync.Mutex
	// attackFrom and attackTo delimit the attack (phase).
	attackFrom, attackTo time.Time
	sentAt               map[string][]time.Time
	// restarted: a drone's index went back (the camera's session
	// started over): its sequence is no longer the one sent.
	restarted map[string]bool
	frames    map[string]map[string]int // MAVLink: frame bytes → index
	stored    map[string][]int
	// delays are by phase, by phase/drone and by phase/drone/stage
	// (intake, store: slowRecord).
	delays map[string][]time.Duration
	worst  map[string]slowRecord // by phase/drone
	// mqttFirst is the good MQTT drone's first message's time (mqttDue).
	mqttFirst time.Time
}

func newGoodLog() *goodLog {
	return &goodLog{sentAt: map[string][]time.Time{}, restarted: map[string]bool{}, frames: map[string]map[string]int{},
		stored: map[string][]int{}, delays: map[string][]time.Duration{}, worst: map[string]slowRecord{}}
}

// sent records message i of drone, sent at at (before it is sent).
func (g *goodLog) sent(drone string, i int, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i != len(g.sentAt[drone]) {
		g.restarted[drone] = true
		return
	}
	g.sentAt[drone] = append(g.sentAt[drone], at)
}

// sentFrame records MAVLink frame i of drone.
func (g *goodLog) sentFrame(drone string, i int, f []byte, at time.Time) {
	g.mu.Lock()
	if g.frames[drone] == nil {
		g.frames[drone] = map[string]int{}
	}
	g.frames[drone][string(f)] = i
	g.mu.Unlock()
	g.sent(drone, i, at)
}

// phases sets the attack's time: from, for d; it returns its start and end.
func (g *goodLog) phases(from time.Time, d time.Duration) (time.Time, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.attackFrom, g.attackTo = from, from.Add(d)
	return g.attackFrom, g.attackTo
}

// phase names the phase of a send time. g.mu is held.
func (g *goodLog) phase(at time.Time) string {
	switch {
	case at.Before(g.attackFrom):
		return "lead-in"
	case at.Before(g.attackTo):
		return "attack"
	}
	return "tail"
}

// got records that drone's records of indices idx, taken by the agent
// at ingest (the record's IngestTime), became readable at now; the
// record's delay is from the send of its last index (sentAt zero: the
// index's own, from its payload).
func (g *goodLog) got(drone string, idx []int, sentAt, ingest, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stored[drone] = append(g.stored[drone], idx...)
	if sentAt.IsZero() {
		last := idx[len(idx)-1]
		if last < 0 || last >= len(g.sentAt[drone]) {
			return // not sent: check says so
		}
		sentAt = g.sentAt[drone][last]
	}
	p, d := g.phase(sentAt), now.Sub(sentAt)
	g.delays[p] = append(g.delays[p], d)
	g.delays[p+"/"+drone] = append(g.delays[p+"/"+drone], d)
	g.delays[p+"/"+drone+"/intake"] = append(g.delays[p+"/"+drone+"/intake"], ingest.Sub(sentAt))
	g.delays[p+"/"+drone+"/store"] = append(g.delays[p+"/"+drone+"/store"], now.Sub(ingest))
	if w := g.worst[p+"/"+drone]; d > w.total {
		g.worst[p+"/"+drone] = slowRecord{total: d, intake: ingest.Sub(sentAt), store: now.Sub(ingest), at: sentAt.Sub(g.attackFrom)}
	}
}

// slowRecord is a good drone's slowest record of a phase: its delay,
// split at the agent's taking it (the record's IngestTime) into the
// intake's part (socket, parsing, a chunk's assembly) and the store's
// (batch window, queue, group commit, the reader's wake-up), and its
// send time from the attack's start.
type slowRecord struct {
	total, intake, store, at time.Duration
}

// tail reads both streams from their head as records become readable
// until the returned stop is called.
func (g *goodLog) tail(t *testing.T, streams ...*localstream.Stream) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, st := range streams {
		rd, err := st.NewReader(st.HeadCut(), nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer rd.Close()
			for {
				rec, err := rd.Next(ctx)
				if err != nil {
					return
				}
				g.record(t, rec, time.Now())
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// record takes one stored record of a good drone.
func (g *goodLog) record(t *testing.T, rec localstream.Record, now time.Time) {
	switch rec.RoutingKey {
	case goodMQTT:
		var m mqttsim.Telemetry
		if err := json.Unmarshal(rec.Payload, &m); err != nil {
			g.got(rec.RoutingKey, []int{-1}, now, now, now)
			return
		}
		g.got(rec.RoutingKey, []int{int(m.Seq) - 1}, g.mqttDue(m), time.Unix(0, rec.IngestTime), now)
	case goodMavUDP, goodMavTCP:
		g.mu.Lock()
		i, ok := g.frames[rec.RoutingKey][string(rec.Payload)]
		g.mu.Unlock()
		if !ok {
			i = -1 // a frame the drone never sent
		}
		g.got(rec.RoutingKey, []int{i}, time.Time{}, time.Unix(0, rec.IngestTime), now)
	case goodRTP, goodCam:
		if rec.Flags.Has(localstream.FlagRaw) {
			g.got(rec.RoutingKey, []int{-1}, now, now, now)
			return
		}
		c, err := video.DecodeChunk(rec.Event)
		if err != nil {
			t.Errorf("chunk of %s: %v", rec.RoutingKey, err)
			return
		}
		var idx []int
		off := 0
		for _, f := range c.Frames {
			i, ok := rtsptest.FrameIndex(c.Payload[off : off+f.Size])
			if !ok {
				i = -1
			}
			idx = append(idx, i)
			off += f.Size
		}
		if len(idx) > 0 {
			g.got(rec.RoutingKey, idx, time.Time{}, time.Unix(0, rec.IngestTime), now)
		}
	}
}

// mqttDue is when the good MQTT drone's message m was due: the
// simulator publishes at goodMQTTRate from its first message's time,
// goodMQTTWindow QoS 1 publishes in flight, and catches up after a wait.
// A message's own timestamp would hide a stall: once the window is full
// the messages due wait in the simulator for an ack and are stamped when
// they go (coordinated omission); with one in flight a 1.5 s stall of
// the store showed in one record of 240. Delay counts from the due time.
func (g *goodLog) mqttDue(m mqttsim.Telemetry) time.Time {
	ts := time.UnixMilli(m.Timestamp)
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.Seq == 1 {
		g.mqttFirst = ts
	}
	if g.mqttFirst.IsZero() {
		return ts // not the first stored: check says so
	}
	return g.mqttFirst.Add(time.Duration(m.Seq-1) * time.Second / goodMQTTRate)
}

// probed records a machine probe sent at sent and synced at now.
func (g *goodLog) probed(sent, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k, d := g.phase(sent)+"/"+machineProbe, now.Sub(sent)
	g.delays[k] = append(g.delays[k], d)
	if d > g.worst[k].total {
		g.worst[k] = slowRecord{total: d, at: sent.Sub(g.attackFrom)}
	}
}

// slowest returns drone's slowest record of phase.
func (g *goodLog) slowest(phase, drone string) slowRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.worst[phase+"/"+drone]
}

// counts returns how many messages each drone recorded as sent.
func (g *goodLog) counts() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return lens(g.sentAt)
}

// storedCounts returns how many records of each drone were stored.
func (g *goodLog) storedCounts() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return lens(g.stored)
}

// lens maps each key of m to its slice's length.
func lens[V any](m map[string][]V) map[string]int {
	n := map[string]int{}
	for k, s := range m {
		n[k] = len(s)
	}
	return n
}

// storedAll reports whether each drone has as many records stored as sent.
func (g *goodLog) storedAll(sent map[string]int) bool {
	got := g.storedCounts()
	for d, n := range sent {
		if got[d] < n {
			return false
		}
	}
	return true
}

// check says what is wrong with drone's stored indices: they must be 0,
// 1, … n-1 (more when more is allowed), once each, in order.
func (g *goodLog) check(drone string, n int, more bool) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.restarted[drone] {
		return "its sequence started over (a new session)"
	}
	got := g.stored[drone]
	for i, idx := range got {
		if idx != i {
			return fmt.Sprintf("stored record %d is index %d (lost, repeated, reordered or never sent; -1: not the drone's)", i, idx)
		}
	}
	if len(got) < n || len(got) > n && !more {
		return fmt.Sprintf("%d stored of %d sent", len(got), n)
	}
	return ""
}

// p99 returns the phase's (drone's, if not "") 99th percentile delay,
// the count and the maximum.
func (g *goodLog) p99(phase, drone string) (time.Duration, int, time.Duration) {
	key := phase
	if drone != "" {
		key += "/" + drone
	}
	g.mu.Lock()
	ds := slices.Clone(g.delays[key])
	g.mu.Unlock()
	p99, maxD := percentile99(ds)
	return p99, len(ds), maxD
}

// mavFrame is MAVLink frame i of a drone: an ATTITUDE whose time_boot_ms
// is i (distinct frames: the store check finds each by its bytes).
func mavFrame(t *testing.T, sysid uint8, i int) []byte {
	f, err := mavlink.DefaultDialect().Encode(false, uint8(i), sysid, 1, &common.MessageAttitude{TimeBootMs: uint32(i)})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// every calls f(i) every period (i = 0, 1, …) until stop is closed or
// until (if not zero) has passed.
func every(period time.Duration, stop <-chan struct{}, until time.Time, f func(i int)) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for i := 0; until.IsZero() || time.Now().Before(until); i++ {
		f(i)
		select {
		case <-stop:
			return
		case <-tk.C:
		}
	}
}

// sendGoodMAVLinkUDP is the good MAVLink UDP drone (system id 1): 50
// frames a second from one socket until end.
func sendGoodMAVLinkUDP(t *testing.T, g *goodLog, addr string, end time.Time) {
	conns := udpSenders(t, addr, 1)
	if conns == nil {
		return
	}
	c := conns[0]
	every(20*time.Millisecond, nil, end, func(i int) {
		f := mavFrame(t, 1, i)
		g.sentFrame(goodMavUDP, i, f, time.Now())
		c.Write(f)
	})
}

// sendGoodMAVLinkTCP is the good MAVLink TCP drone (system id 2): it
// dials at from, while idle connections hold every slot, and sends 50
// frames a second until end. A link the intake closes at once (refused:
// no slot could be freed yet) is redialled, as a drone's router does;
// the drone sends on a link only once it has held for 300 ms.
func sendGoodMAVLinkTCP(t *testing.T, g *goodLog, addr string, from, end time.Time, up chan<- struct{}) {
	time.Sleep(time.Until(from))
	var c net.Conn
	for dials := 1; ; dials++ {
		var err error
		if c, err = net.Dial("tcp", addr); err != nil {
			t.Error(err)
			return
		}
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.Close() // refused
			if time.Now().After(end) {
				t.Errorf("the good MAVLink TCP drone was refused %d times", dials)
				return
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		t.Logf("the good MAVLink TCP drone got in at dial %d, %v after the idle connections", dials, time.Since(from.Add(-2500*time.Millisecond)))
		break
	}
	defer c.Close()
	every(20*time.Millisecond, nil, end, func(i int) {
		f := mavFrame(t, 2, i)
		g.sentFrame(goodMavTCP, i, f, time.Now())
		if _, err := c.Write(f); err != nil {
			t.Errorf("good MAVLink TCP drone: %v", err)
		}
		if i == 50 {
			close(up) // bound to this link for a second: the spoofer may start on it
		}
	})
}

// sendGoodRTP is the good RTP video drone: numbered frames
// (rtsptest.FrameNAL) at 30 a second, one packet each, from one socket.
func sendGoodRTP(t *testing.T, g *goodLog, addr string, end time.Time) {
	conns := udpSenders(t, addr, 1)
	if conns == nil {
		return
	}
	c := conns[0]
	every(time.Second/30, nil, end, func(i int) {
		b, _ := videoFrame(goodSSRC, uint16(i), i).Marshal()
		g.sent(goodRTP, i, time.Now())
		c.Write(b)
	})
}

// videoFrame is numbered frame i in one RTP packet of seq.
func videoFrame(ssrc uint32, seq uint16, i int) *rtp.Packet {
	return &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: uint32(i) * 3000, SSRC: ssrc, Marker: true},
		Payload: rtsptest.FrameNAL(i)}
}

// udpSenders returns n UDP sockets sending to addr (n source ports),
// closed when the test ends; nil, the test failed, if one cannot be had.
func udpSenders(t *testing.T, addr string, n int) []net.Conn {
	var conns []net.Conn
	for range n {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Error(err)
			return nil
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// attackTargets are the agent's addresses and the attacks' settings,
// passed to the attackers' process (EDGE_HOSTILE_ATTACKERS, JSON).
type attackTargets struct {
	Listen, MAVUDP, MAVTCP, RTP string
	MAVTCPIdle                  int
	Seed                        uint64
}

// attackersEnv carries attackTargets to TestHostileAttackers.
const attackersEnv = "EDGE_HOSTILE_ATTACKERS"

// attackers is the attackers' process: this test binary running
// TestHostileAttackers. The attacks come from another process, as from
// another host: their CPU is not the agent's process's, whose good
// drones' delay is measured, and their goroutines do not queue in its
// scheduler (in-process they took 15 % of its CPU samples, and a burst
// of them — 300 connections dialled at the attack's start — delayed the
// good drones' records on a starved machine).
type attackers struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bytes.Buffer
	mu    sync.Mutex // the writes to in
	ended chan struct{}
}

// startAttackers starts the attackers' process; it attacks once start is
// called, until stop.
func startAttackers(t *testing.T, at attackTargets) *attackers {
	b, _ := json.Marshal(at)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileAttackers$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), attackersEnv+"="+string(b))
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &attackers{t: t, cmd: cmd, in: in, out: out, ended: make(chan struct{})}
	t.Cleanup(func() { a.in.Close(); a.cmd.Process.Kill(); <-a.ended })
	go func() { cmd.Wait(); close(a.ended) }()
	return a
}

func (a *attackers) say(line string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	io.WriteString(a.in, line+"\n")
}

// start starts the attacks; once tcpUp is closed, the good MAVLink TCP
// drone's system id is spoofed too.
func (a *attackers) start(tcpUp <-chan struct{}) {
	a.say("go")
	go func() {
		select {
		case <-tcpUp:
			a.say("tcp-up")
		case <-a.ended:
		}
	}()
}

// stop ends the attacks and waits for the process: its failures are the
// test's, its log lines the test's log.
func (a *attackers) stop() {
	a.mu.Lock()
	a.in.Close()
	a.mu.Unlock()
	select {
	case <-a.ended:
	case <-time.After(30 * time.Second):
		a.t.Errorf("the attackers' process did not end 30 s after the attack")
		a.cmd.Process.Kill()
		<-a.ended
	}
	for _, l := range strings.Split(a.out.String(), "\n") {
		if strings.Contains(l, "_test.go:") {
			a.t.Logf("attackers: %s", strings.TrimSpace(l))
		}
	}
	if !a.cmd.ProcessState.Success() {
		a.t.Errorf("the attackers' process failed (%v):\n%s", a.cmd.ProcessState, a.out.String())
	}
}

// TestHostileAttackers is TestHostileEveryIntake's attackers, run in a
// process of their own (startAttackers); skipped otherwise. It attacks
// from the line "go" on its stdin until stdin ends; the line "tcp-up"
// says the good MAVLink TCP drone is bound.
func TestHostileAttackers(t *testing.T) {
	env := os.Getenv(attackersEnv)
	if env == "" {
		t.Skip("the attackers of TestHostileEveryIntake, run by it in a process of their own")
	}
	var at attackTargets
	if err := json.Unmarshal([]byte(env), &at); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(os.Stdin)
	if !lines.Scan() || lines.Text() != "go" {
		return // the test ended before the attack
	}
	stop, tcpUp := make(chan struct{}), make(chan struct{})
	go func() {
		for lines.Scan() {
			if lines.Text() == "tcp-up" {
				close(tcpUp)
			}
		}
		close(stop)
	}()
	var attacks sync.WaitGroup
	attacks.Go(func() { attackIdleConnections(t, &neighbourRig{listen: at.Listen}, stop) })
	attacks.Go(func() { attackListenerIDs(t, at.Listen, stop) })
	attacks.Go(func() { attackListenerResends(t, at.Listen, stop) })
	attacks.Go(func() { attackMAVLinkTCPIdle(t, at.MAVTCP, at.MAVTCPIdle, stop) })
	attacks.Go(func() { attackMAVLinkUDP(t, at.MAVUDP, at.Seed, tcpUp, stop) })
	attacks.Go(func() { attackRTP(t, at.RTP, at.Seed, stop) })
	attacks.Wait()
}

// attackListenerIDs publishes, on the listener, QoS 1 messages to a new
// drone id each, 400 a second, never waiting for an ack (the refused ones
// get none).
func attackListenerIDs(t *testing.T, listen string, stop <-chan struct{}) {
	time.Sleep(500 * time.Millisecond) // the resending client's drone takes its slot first
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + listen).SetClientID("hostile-ids").SetWriteTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Errorf("hostile-ids connect: %v", tok.Error())
		return
	}
	defer c.Disconnect(50)
	every(10*time.Millisecond, stop, time.Time{}, func(i int) {
		for k := range 4 {
			c.Publish(fmt.Sprintf("drones/hostile-id-%d/telemetry", 4*i+k), 1, false, `{"spam":true}`)
		}
	})
}

// attackListenerResends: a persistent session (clean session off) sends
// each QoS 1 message twice, the copy with DUP set — late copies.
func attackListenerResends(t *testing.T, listen string, stop <-chan struct{}) {
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.ClientIdentifier, cp.Keepalive = "MQTT", 4, "hostile-resends", 60
	if err := cp.Write(c); err != nil {
		t.Error(err)
		return
	}
	go io.Copy(io.Discard, c) // CONNACK, PUBACKs
	every(50*time.Millisecond, stop, time.Time{}, func(i int) {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Payload = "drones/hostile-resends/telemetry", 1, uint16(1+i%1000), []byte(fmt.Sprintf(`{"n":%d}`, i))
		p.Write(c)
		p.Dup = true
		p.Write(c)
	})
}

// attackMAVLinkTCPIdle opens n connections to the MAVLink TCP server
// (more than its slots) and holds them, silent, until stop (issue 37
// case 7: 16 idle connections held every slot for good).
func attackMAVLinkTCPIdle(t *testing.T, addr string, n int, stop <-chan struct{}) {
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			continue
		}
		conns = append(conns, c)
	}
	<-stop
	for _, c := range conns {
		c.Close()
	}
}

// attackMAVLinkUDP floods the MAVLink UDP server from three sockets:
// garbage and frames of new system ids; the good drones' system ids
// (the TCP drone's once tcpUp is closed); and the hostile drone 3 whose
// frames come reordered with late copies (seq 0 1 3 2 2 3 4 …).
func attackMAVLinkUDP(t *testing.T, addr string, seed uint64, tcpUp <-chan struct{}, stop <-chan struct{}) {
	conns := udpSenders(t, addr, 3)
	if conns == nil {
		return
	}
	rng := rand.New(rand.NewPCG(seed, 37))
	junk := make([]byte, 1200)
	enc := mavlink.DefaultDialect()
	var wg sync.WaitGroup
	wg.Go(func() { // garbage and ever new system ids: 100 + 300 a second
		every(10*time.Millisecond, stop, time.Time{}, func(i int) {
			for k := range junk {
				junk[k] = byte(rng.Uint32())
			}
			conns[0].Write(junk)
			for range 3 {
				f, _ := enc.Encode(false, uint8(i), uint8(10+rng.IntN(240)), uint8(rng.IntN(256)), &common.MessageHeartbeat{})
				conns[0].Write(f)
			}
		})
	})
	wg.Go(func() { // the good drones' system ids from another source: 200 a second
		every(10*time.Millisecond, stop, time.Time{}, func(i int) {
			conns[1].Write(mavFrame(t, 1, 1_000_000+i))
			select {
			case <-tcpUp:
				conns[1].Write(mavFrame(t, 2, 1_000_000+i))
			default:
			}
		})
	})
	wg.Go(func() { // drone 3: every fourth frame swapped with the next, and a late copy
		order := []int{0, 1, 3, 2, 2, 1}
		every(20*time.Millisecond, stop, time.Time{}, func(i int) {
			for _, k := range order {
				conns[2].Write(mavFrame(t, 3, 4*i+k))
			}
		})
	})
	wg.Wait()
}

// attackRTP floods the RTP port from three sockets: garbage and SSRCs
// that each pass probation and fall silent; the good drone's SSRC with
// random sequence numbers; and the hostile drone whose packets come
// reordered with late copies.
func attackRTP(t *testing.T, addr string, seed uint64, stop <-chan struct{}) {
	conns := udpSenders(t, addr, 3)
	if conns == nil {
		return
	}
	// A source of randomness each: the senders run at once.
	rng, spoofRng := rand.New(rand.NewPCG(seed, 38)), rand.New(rand.NewPCG(seed, 39))
	var wg sync.WaitGroup
	wg.Go(func() { // garbage 200 a second, a new SSRC 100 a second (two packets in sequence each)
		junk := make([]byte, 600)
		every(10*time.Millisecond, stop, time.Time{}, func(i int) {
			for range 2 {
				for k := range junk {
					junk[k] = byte(rng.Uint32())
				}
				junk[0] &^= 0x80 // not version 2
				conns[0].Write(junk)
			}
			for seq := range 2 {
				b, _ := videoFrame(0x7000_0000+uint32(i), uint16(seq), seq).Marshal()
				conns[0].Write(b)
			}
		})
	})
	wg.Go(func() { // the good drone's SSRC from another source: 300 a second
		every(10*time.Millisecond, stop, time.Time{}, func(i int) {
			for range 3 {
				b, _ := videoFrame(goodSSRC, uint16(spoofRng.Uint32()), spoofRng.IntN(1<<20)).Marshal()
				conns[1].Write(b)
			}
		})
	})
	wg.Go(func() { // the reordered drone: 30 frames a second, in blocks of 4 as 0 2 1 3, and a late copy of 1
		order := []int{0, 2, 1, 3, 1}
		every(4*time.Second/30, stop, time.Time{}, func(i int) {
			for _, k := range order {
				b, _ := videoFrame(reorderSSRC, uint16(4*i+k), 4*i+k).Marshal()
				conns[2].Write(b)
			}
		})
	})
	wg.Wait()
}

// schedStat returns the CPU time of the process's threads and how long
// they have waited for a CPU while runnable, from each thread's
// /proc/self/task/*/schedstat (Linux; false elsewhere). Mostly the
// time other processes took from it, but not only: the process has more
// threads than GOMAXPROCS (sysmon, threads back from a syscall, idle
// ones spinning for work), and those wait behind its own too.
func schedStat() (cpu, wait time.Duration, ok bool) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, 0, false
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			c, _ := strconv.ParseInt(f[0], 10, 64)
			w, _ := strconv.ParseInt(f[1], 10, 64)
			cpu, wait = cpu+time.Duration(c), wait+time.Duration(w)
		}
	}
	return cpu, wait, true
}

// runtimeStat is what the Go runtime says of its scheduling and GC.
type runtimeStat struct {
	sched   *metrics.Float64Histogram // /sched/latencies: runnable to running
	gcPause *metrics.Float64Histogram // /sched/pauses/total/gc: stop-the-world
	gcs     uint64
}

func readRuntime() runtimeStat {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return runtimeStat{sched: s[0].Value.Float64Histogram(), gcPause: s[1].Value.Float64Histogram(), gcs: s[2].Value.Uint64()}
}

// since says what happened between r0 and r: GC cycles, the longest
// stop-the-world pause, and the p99 and longest time a goroutine waited
// runnable for a thread (histogram buckets: upper bounds).
func (r runtimeStat) since(r0 runtimeStat) string {
	q := func(h, h0 *metrics.Float64Histogram, q float64) (time.Duration, time.Duration) {
		var n uint64
		counts := make([]uint64, len(h.Counts))
		for i := range h.Counts {
			counts[i] = h.Counts[i] - h0.Counts[i]
			n += counts[i]
		}
		var p, top time.Duration
		var seen uint64
		for i, c := range counts {
			if c == 0 {
				continue
			}
			up := time.Duration(min(h.Buckets[i+1], 1e3) * 1e9)
			seen += c
			if p == 0 && float64(seen) >= q*float64(n) {
				p = up
			}
			top = up
		}
		return p, top
	}
	s99, sMax := q(r.sched, r0.sched, 0.99)
	_, gMax := q(r.gcPause, r0.gcPause, 1)
	return fmt.Sprintf("%d GC cycles, longest GC pause ≤%v; goroutines waited for a thread p99 ≤%v, longest ≤%v", r.gcs-r0.gcs, gMax, s99, sMax)
}

// probeMachine is a peer of the good drones that the agent does not
// touch, of the shape of a record's path through it: every 20 ms until
// stop, a datagram carrying its send time goes over loopback UDP to a
// reader goroutine, which hands it to a writer goroutine that writes it
// to a file in dir and fsyncs it, which hands it to a third that
// records it — a socket read, two handoffs and a durable write, on the
// same machine, disk and process as the agent's intakes and store. Its
// delay (send to recorded), by phase in g, is what the machine alone
// costs a record at that moment; the returned function stops it.
func probeMachine(t *testing.T, g *goodLog, dir string) (stop func()) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(dir + "/machine-probe")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	read, synced := make(chan int64, 64), make(chan int64, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(read)
		b := make([]byte, 64)
		for {
			n, _, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			sent, _ := strconv.ParseInt(string(b[:n]), 10, 64)
			read <- sent
		}
	})
	wg.Go(func() {
		defer close(synced)
		for sent := range read {
			f.WriteString(strconv.FormatInt(sent, 10) + "\n")
			f.Sync()
			synced <- sent
		}
	})
	wg.Go(func() {
		for sent := range synced {
			g.probed(time.Unix(0, sent), time.Now())
		}
	})
	wg.Go(func() {
		every(20*time.Millisecond, done, time.Time{}, func(int) { c.Write([]byte(strconv.FormatInt(time.Now().UnixNano(), 10))) })
	})
	return func() {
		close(done)
		c.Close()
		time.Sleep(100 * time.Millisecond) // the last probes arrive
		pc.Close()
		wg.Wait()
		f.Close()
	}
}
