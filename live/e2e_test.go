package live

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replay"
)

// TestTimeToLiveViewEndToEnd is issue 28's time to live view through the
// real agent: `edge-agent run` (built from this module) behind a proxy
// that forwards 2 Mbit/s and is down, its uplink cap the same; fed through
// its own intakes while the link is down — 4 telemetry drones as a JSONL
// capture replayed into a real Mosquitto (`edge-agent replay --jsonl
// --speed max`) and 2 video drones as the recorded H.264 capture
// (testdata/h264.pcap, `edge-agent replay --pcap --speed max`, again and
// again from each drone's own source port); then the telemetry drones fly
// on in real time (mqttsim) and the link returns. The centre must hold
// every telemetry drone's position from the last 2 s within 5 s while the
// backlog still drains, and each video drone's latest keyframe (ffprobe
// decodes it). At the end: every event the agent stored at the centre
// exactly once, each drone's in order, and the lane's bytes at the proxy
// within its share. EDGE_E2E_CAPTURE_S seconds offline (default 6).
// BenchmarkTimeToLiveViewEndToEnd runs it longer beside a NATS leaf.
func TestTimeToLiveViewEndToEnd(t *testing.T) {
	r := e2eLiveView(t, time.Duration(envInt("EDGE_E2E_CAPTURE_S", 6))*time.Second, false)
	if r.agent > 5*time.Second {
		t.Errorf("agent: live view after %v, want within 5 s", r.agent)
	}
}

// BenchmarkTimeToLiveViewEndToEnd is TestTimeToLiveViewEndToEnd with a
// longer outage (EDGE_E2E_CAPTURE_S, default 60) and, in the same run, a
// NATS leaf node behind its own 2 Mbit/s proxy fed the same captures: a
// bridge subscribed to the same Mosquitto publishes every telemetry
// message into the leaf's TEL stream, and every video replay is sent a
// second time to a UDP bridge that publishes each RTP packet into VID.
// One run (b.N is ignored):
//
//	go test -run '^$' -bench TimeToLiveViewEndToEnd -benchtime 1x -timeout 30m ./live
func BenchmarkTimeToLiveViewEndToEnd(b *testing.B) {
	r := e2eLiveView(b, time.Duration(envInt("EDGE_E2E_CAPTURE_S", 60))*time.Second, true)
	b.ReportMetric(r.agent.Seconds(), "agent-s")
	b.ReportMetric(r.video.Seconds(), "agent-keyframes-s")
	b.ReportMetric(r.backlog.Seconds(), "agent-backlog-s")
	b.ReportMetric(r.leaf.Seconds(), "leaf-s")
}

type e2eResult struct {
	agent, video, backlog, leaf time.Duration
}

// buildAgent builds cmd/edge-agent into a temporary directory.
func buildAgent(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edge-agent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/edge-agent/edge-agent/cmd/edge-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// agentStatus is the part of /status the scenario reads.
type agentStatus struct {
	Streams []struct {
		Name               string `json:"name"`
		CommittedWatermark *struct {
			LowerNs int64 `json:"lower_ns"`
		} `json:"committed_watermark"`
		CatchUp *struct {
			BacklogEvents uint64 `json:"backlog_events"`
			BacklogBytes  uint64 `json:"backlog_bytes"`
		} `json:"catch_up"`
	} `json:"streams"`
}

func getStatus(port int) (agentStatus, error) {
	var s agentStatus
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// backlogOf is stream's backlog events and bytes (^0 when unknown).
func (s agentStatus) backlogOf(stream string) (uint64, uint64) {
	for _, st := range s.Streams {
		if st.Name == stream && st.CatchUp != nil {
			return st.CatchUp.BacklogEvents, st.CatchUp.BacklogBytes
		}
	}
	return ^uint64(0), 0
}

func (s agentStatus) committedLower(stream string) int64 {
	for _, st := range s.Streams {
		if st.Name == stream && st.CommittedWatermark != nil {
			return st.CommittedWatermark.LowerNs
		}
	}
	return 0
}

// telemetryCapture writes the JSONL capture of drones reporting at 10 Hz
// for d, ending at end, in mqttsim's payload: n messages a drone.
func telemetryCapture(t testing.TB, path string, drones int, d time.Duration, end time.Time) (n int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	n = int(d / (100 * time.Millisecond))
	for i := range n {
		at := end.Add(-time.Duration(n-i) * 100 * time.Millisecond)
		for k := 1; k <= drones; k++ {
			drone := fmt.Sprintf("drone-%d", k)
			p, _ := json.Marshal(mqttsim.Telemetry{Drone: drone, Seq: uint64(i + 1), Timestamp: at.UnixMilli(),
				Lat: 48.1 + float64(i)*1e-5, Lon: 11.5 + float64(k)*1e-3, AltM: 100, SpeedMps: 12, Battery: 90, Mode: "AUTO"})
			line, _ := json.Marshal(replay.NewTelemetryRecord(at, "drones/"+drone+"/telemetry", 1, p))
			w.Write(append(line, '\n'))
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

func e2eLiveView(t testing.TB, capture time.Duration, withLeaf bool) e2eResult {
	const link = 2_000_000 / 8
	const telDrones = 4
	videoDrones := []uint32{0x5001, 0x5002}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	bin := buildAgent(t)
	dir := t.TempDir()
	pcap, err := filepath.Abs(filepath.Join("..", "testdata", "h264.pcap"))
	if err != nil {
		t.Fatal(err)
	}

	csrv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "central")})
	if err != nil {
		t.Fatal(err)
	}
	if err := csrv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { csrv.Close() })
	proxy := newLinkProxy(t, csrv.ClientURL()[len("nats://"):], link)
	proxy.setDown(true)
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { brk.Stop() })
	reader, err := nats.Connect(csrv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)

	var leaf *leafPair
	var bridge *leafBridge
	if withLeaf {
		leaf = newLeafPair(t, link)
		leaf.proxy.setDown(true)
		bridge = newLeafBridge(t, leaf, brk.URL(), len(videoDrones))
	}

	httpPort, videoPort := freePort(t), freePort(t)
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`agent_id: e2e
data_dir: %s
http: {listen: "127.0.0.1:%d"}
video: {enabled: true, listen: "127.0.0.1:%d"}
telemetry: {broker: %q}
central: {url: %q, shutdown_timeout: 60s, uplink_bytes_per_sec: %d}
live:
  streams:
    telemetry: {enabled: true, interval: 1s}
    video: {enabled: true, interval: 2s, keyframes: true}
`, filepath.Join(dir, "agent"), httpPort, videoPort, brk.URL(), proxy.URL(), link)), 0o644)
	cmd := exec.Command(bin, "run", "--config", cfg)
	logf, _ := os.Create(filepath.Join(dir, "agent.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		}
		logf.Close()
	})
	testkit.WaitFor(t, 30*time.Second, "the agent's /status", func() bool { _, err := getStatus(httpPort); return err == nil })

	// The offline capture, replayed at full speed through the intakes.
	jsonl := filepath.Join(dir, "telemetry.jsonl")
	perDrone := telemetryCapture(t, jsonl, telDrones, capture, time.Now())
	replays := max(1, int((capture+5*time.Second)/(6*time.Second))) // the pcap holds 6 s
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4*replays+4)
	run := func(args ...string) {
		defer wg.Done()
		if out, err := exec.CommandContext(ctx, bin, append([]string{"replay", "--quiet", "--speed", "max"}, args...)...).CombinedOutput(); err != nil {
			errs <- fmt.Errorf("replay %v: %v\n%s", args, err, out)
		}
	}
	wg.Add(1)
	go run("--jsonl", jsonl, "--mqtt-broker", brk.URL())
	for i, ssrc := range videoDrones {
		from := freeUDPPort(t) // each drone's own source: the agent binds an SSRC to it
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range replays {
				wg.Add(1)
				run("--pcap", pcap, "--to", fmt.Sprintf("127.0.0.1:%d", videoPort), "--ssrc", fmt.Sprint(ssrc),
					"--from", fmt.Sprintf("127.0.0.1:%d", from))
				if bridge != nil {
					wg.Add(1)
					run("--pcap", pcap, "--to", bridge.addr(i), "--ssrc", fmt.Sprint(ssrc))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Everything taken in: telemetry's backlog holds every captured
	// message, video's stops growing.
	var lastVideo uint64
	changed := time.Now()
	testkit.WaitFor(t, 2*time.Minute, "the capture stored", func() bool {
		s, err := getStatus(httpPort)
		if err != nil {
			return false
		}
		te, _ := s.backlogOf("telemetry")
		ve, _ := s.backlogOf("video")
		if ve != lastVideo || ve == 0 {
			changed, lastVideo = time.Now(), ve
		}
		return te == uint64(telDrones*perDrone) && time.Since(changed) > 2*time.Second
	})
	s0, _ := getStatus(httpPort)
	_, videoBytes := s0.backlogOf("video")
	t.Logf("offline capture of %v stored in %.1f s: %d telemetry messages of %d drones, %d video chunks (%.1f MB) of %d drones (%d replays of the 6 s capture each)",
		capture, time.Since(start).Seconds(), telDrones*perDrone, telDrones, lastVideo, float64(videoBytes)/1e6, len(videoDrones), replays)
	var captured uint64
	if leaf != nil {
		testkit.WaitFor(t, 2*time.Minute, "the leaf's capture stored", func() bool { return bridge.tel.Load() >= int64(telDrones*perDrone) })
		select {
		case <-leaf.leafJS.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("leaf publishes not acked")
		}
		captured = uint64(bridge.tel.Load())
		t.Logf("leaf: %d telemetry messages and %d RTP packets captured", captured, bridge.rtp.Load())
	}

	// The drones fly on; the link returns.
	simCtx, stopSim := context.WithCancel(ctx)
	simDone := make(chan error, 1)
	var flying sync.Map // drones with a message acked by the broker
	go func() {
		_, err := mqttsim.Simulate(simCtx, mqttsim.Config{Broker: brk.URL(), Drones: telDrones, Rate: 10, Duration: 30 * time.Minute,
			FirstSeq: uint64(perDrone + 1), NoStatus: true, OnPublished: func(drone, _ string, _ uint64, _ []byte) { flying.Store(drone, true) }})
		simDone <- err
	}()
	testkit.WaitFor(t, 30*time.Second, "the drones flying", func() bool {
		n := 0
		flying.Range(func(any, any) bool { n++; return true })
		return n == telDrones
	})
	up := time.Now()
	proxy.setDown(false)
	if leaf != nil {
		leaf.proxy.setDown(false)
	}
	var res e2eResult
	leafDone := make(chan struct{})
	go func() {
		defer close(leafDone)
		if leaf == nil {
			return
		}
		var drones []string
		for k := 1; k <= telDrones; k++ {
			drones = append(drones, fmt.Sprintf("drone-%d", k))
		}
		d, ok := current(ctx, up, drones, 60*time.Second+60*capture, func() map[string]int64 {
			out := map[string]int64{}
			for _, d := range drones {
				out[d] = leaf.hubNewest(ctx, d)
			}
			return out
		})
		atHub := leaf.hubMsgs(ctx, "TEL")
		if !ok {
			t.Errorf("leaf: the hub never held every drone's position from the last 2 s")
			return
		}
		res.leaf = d
		t.Logf("NATS leaf node: every drone's position from the last 2 s at the hub %.2f s after the link returned (%d telemetry messages there, %d captured offline)", d.Seconds(), atHub, captured)
		if atHub < captured {
			t.Errorf("leaf: its newest event arrived before its backlog (%d of %d captured at the hub)", atHub, captured)
		}
	}()

	var telDroneIDs []string
	for k := 1; k <= telDrones; k++ {
		telDroneIDs = append(telDroneIDs, fmt.Sprintf("drone-%d", k))
	}
	agentT, ok := current(ctx, up, telDroneIDs, 30*time.Second, func() map[string]int64 {
		out := map[string]int64{}
		vals, _ := Read(ctx, reader, ReadOptions{Agent: "e2e", Stream: "telemetry"})
		for _, v := range vals {
			out[v.Drone] = v.EventTimeNs
		}
		return out
	})
	s1, _ := getStatus(httpPort)
	te, tb := s1.backlogOf("telemetry")
	ve, vb := s1.backlogOf("video")
	if !ok {
		t.Fatal("agent: the centre never held every drone's position from the last 2 s")
	}
	res.agent = agentT
	t.Logf("agent: every telemetry drone's position from the last 2 s at the centre %.2f s after the link returned; backlog then: telemetry %d events (%.2f MB), video %d chunks (%.1f MB)",
		agentT.Seconds(), te, float64(tb)/1e6, ve, float64(vb)/1e6)
	if te+ve == 0 {
		t.Errorf("agent: the backlog had drained by the live view: the scenario proves nothing")
	}
	var keyframes []Value
	testkit.WaitFor(t, 60*time.Second, "each video drone's keyframe at the centre", func() bool {
		keyframes, _ = Read(ctx, reader, ReadOptions{Agent: "e2e", Stream: "video"})
		return len(keyframes) == len(videoDrones)
	})
	res.video = time.Since(up)
	t.Logf("agent: each video drone's latest keyframe at the centre %.2f s after the link returned", res.video.Seconds())
	for _, v := range keyframes {
		checkKeyframe(t, dir, v)
	}

	// The backlog drains: telemetry's committed watermark within 2 s of
	// the clock and video's backlog empty.
	testkit.WaitFor(t, 10*time.Minute, "the backlog drained", func() bool {
		s, err := getStatus(httpPort)
		if err != nil {
			return false
		}
		ve, _ := s.backlogOf("video")
		return ve == 0 && s.committedLower("telemetry") >= time.Now().Add(-2*time.Second).UnixNano()
	})
	res.backlog = time.Since(up)
	t.Logf("agent: backlog drained (video's empty, telemetry's committed watermark within 2 s of the clock) %.2f s after the link returned", res.backlog.Seconds())
	<-leafDone
	end := time.Now()
	stopSim()
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "the telemetry backlog empty", func() bool {
		s, err := getStatus(httpPort)
		te, _ := s.backlogOf("telemetry")
		return err == nil && te == 0
	})
	liveBytes, otherBytes := proxy.window(up, end)
	span := end.Sub(up).Seconds()
	share := 0.1 * link * span
	t.Logf("at the proxy from the link's return until the measurements ended (%.1f s): live %d B (%.0f B/s; its share %.0f B/s), other %d B (%.0f B/s)",
		span, liveBytes, float64(liveBytes)/span, 0.1*link, otherBytes, float64(otherBytes)/span)
	// The share's token bucket lets one value through ahead of its tokens.
	if float64(liveBytes) > share+float64(NewDefaultConfig().MaxValueBytes)+4096 {
		t.Errorf("the lane sent %d B at the proxy, over its share %.0f B + one value", liveBytes, share)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("agent after SIGTERM: %v", err)
	}
	checkExactlyOnce(t, filepath.Join(dir, "agent", "store"), csrv.ClientURL(), "e2e")
	return res
}

// checkKeyframe has ffprobe decode the live keyframe v holds.
func checkKeyframe(t testing.TB, dir string, v Value) {
	t.Helper()
	if !v.Keyframe || len(v.Payload) == 0 {
		t.Fatalf("video %s: live value is not a keyframe (%d bytes)", v.Drone, len(v.Payload))
	}
	path := filepath.Join(dir, v.Drone+".h264")
	if err := os.WriteFile(path, v.Payload, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-f", "h264", "-select_streams", "v:0", "-show_frames",
		"-show_entries", "frame=key_frame,pict_type,width,height", "-of", "csv=p=0", path).CombinedOutput()
	if err != nil {
		t.Fatalf("video %s: ffprobe: %v\n%s", v.Drone, err, out)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) != 1 || lines[0] != "1,640,360,I" { // key_frame, width, height, pict_type
		t.Fatalf("video %s: ffprobe decoded %q from the %d-byte keyframe, want one 640x360 I frame", v.Drone, out, len(v.Payload))
	}
	t.Logf("video %s: the keyframe at the centre (%d bytes, age %.1f s) decodes: %s", v.Drone, len(v.Payload), v.Age.Seconds(), lines[0])
}

// checkExactlyOnce reads every event of the agent's store at the centre:
// each local event there once, nothing else; each drone's in the order
// stored (telemetry also by its seq: the drone's own order).
func checkExactlyOnce(t testing.TB, storeDir, url, agent string) {
	t.Helper()
	s, err := localstream.Open(storeDir, localstream.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, st := range s.Streams() {
		recs, err := st.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		local := map[localstream.Position]int{} // its place in the local order, from 1
		for i, rec := range recs {
			local[rec.Position] = i + 1
		}
		items, err := centralread.ReadAll(context.Background(), nc, st.Name(), centralread.ReadOptions{Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[localstream.Position]bool{}
		lastSeq, lastLocal := map[string]uint64{}, map[string]int{}
		for _, it := range items {
			if it.Kind != centralread.ItemEvent {
				continue
			}
			rec := it.Event.Record
			if seen[rec.Position] || local[rec.Position] == 0 {
				t.Fatalf("%s: %v duplicated or unknown at the centre", st.Name(), rec.Position)
			}
			seen[rec.Position] = true
			if l := local[rec.Position]; l < lastLocal[rec.RoutingKey] {
				t.Fatalf("%s %s: %v at the centre after an event stored after it", st.Name(), rec.RoutingKey, rec.Position)
			} else {
				lastLocal[rec.RoutingKey] = l
			}
			if st.Name() == "telemetry" {
				var m mqttsim.Telemetry
				if err := json.Unmarshal(rec.Payload, &m); err != nil {
					t.Fatalf("telemetry at %v: %v", rec.Position, err)
				}
				if m.Seq <= lastSeq[m.Drone] {
					t.Fatalf("telemetry %s: seq %d after %d at the centre", m.Drone, m.Seq, lastSeq[m.Drone])
				}
				lastSeq[m.Drone] = m.Seq
			}
		}
		if len(seen) != len(local) {
			t.Fatalf("%s: %d events local, %d at the centre", st.Name(), len(local), len(seen))
		}
		t.Logf("%s: %d events local, each at the centre once, each drone's in the order stored", st.Name(), len(local))
	}
}

func freeUDPPort(t testing.TB) int {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// leafBridge feeds the leaf node what the agent's intakes get: every
// telemetry message of the Mosquitto broker into TEL (tel.<drone>, the
// payload's timestamp as Edge-Event-Time) and every RTP packet sent to
// its UDP sockets into VID (vid.<drone>).
type leafBridge struct {
	udp      []*net.UDPConn
	tel, rtp atomic.Int64
}

func (b *leafBridge) addr(i int) string { return b.udp[i].LocalAddr().String() }

func newLeafBridge(t testing.TB, p *leafPair, brokerURL string, videoDrones int) *leafBridge {
	t.Helper()
	b := &leafBridge{}
	opts := mqtt.NewClientOptions().AddBroker(brokerURL).SetClientID("leaf-bridge").SetOrderMatters(true)
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("bridge: connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	tok := c.Subscribe("drones/+/telemetry", 1, func(_ mqtt.Client, m mqtt.Message) {
		var tm mqttsim.Telemetry
		if json.Unmarshal(m.Payload(), &tm) != nil {
			return
		}
		if p.publish(context.Background(), "tel", tm.Drone, tm.Timestamp*int64(time.Millisecond), m.Payload()) == nil {
			b.tel.Add(1)
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("bridge: subscribe: %v", tok.Error())
	}
	for i := range videoDrones {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		conn.SetReadBuffer(32 << 20)
		t.Cleanup(func() { conn.Close() })
		b.udp = append(b.udp, conn)
		drone := "vid-" + strconv.Itoa(i+1)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := conn.Read(buf)
				if err != nil {
					return
				}
				if p.publish(context.Background(), "vid", drone, time.Now().UnixNano(), append([]byte(nil), buf[:n]...)) == nil {
					b.rtp.Add(1)
				}
			}
		}()
	}
	return b
}
