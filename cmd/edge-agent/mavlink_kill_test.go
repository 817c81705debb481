package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/localstream"
)

// nodeMAVLink returns the directory of the node-mavlink sender with its
// packages installed (npm ci from the lock file when missing); it skips
// when node or npm is not installed.
func nodeMAVLink(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install -y nodejs npm): the node-mavlink sender cannot run", bin)
		}
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "node-mavlink"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-mavlink")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return dir
}

// sentFrame is one frame the node sender wrote.
type sentFrame struct {
	sysid, index int
}

// readSentLog reads the sender's log: frame bytes (hex) → which frame.
func readSentLog(t *testing.T, path string) (map[string]sentFrame, map[int]int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byHex, last := map[string]sentFrame{}, map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 3 {
			t.Fatalf("sender log line %q", sc.Text())
		}
		sys, _ := strconv.Atoi(parts[0])
		idx, _ := strconv.Atoi(parts[1])
		if _, dup := byHex[parts[2]]; dup {
			t.Fatalf("the sender wrote the same bytes twice (%s): the frames would not be told apart", parts[2])
		}
		byHex[parts[2]] = sentFrame{sys, idx}
		last[sys] = max(last[sys], idx)
	}
	return byHex, last
}

// TestNodeMAVLinkThroughKillsAndCuts: three drones played by node-mavlink
// (not this project's code; MAVLink 1 and 2) send over TCP, through a link
// the test cuts, to `edge-agent run`, which is SIGKILLed and restarted
// mid-stream. At the centre every frame is byte for byte one the sender
// wrote, per drone in the order written, none twice; every frame lost on
// the way (cut, kill) is before an event flagged discontinuity — never
// silent — and after the last fault every frame arrives.
func TestNodeMAVLinkThroughKillsAndCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 40 s fault test")
	}
	nodeDir := nodeMAVLink(t)
	// TCP: a cut resets the connection; UDP: a cut drops every datagram
	// for 300 ms, and a kill loses what comes while the agent is down.
	count := 2000 * testkit.Rounds(1)
	const drones, rate = 3, 200
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			sentLog := filepath.Join(t.TempDir(), "sent.log")
			throughFaults(t, network, faultSender{
				runFor: time.Duration(count/rate) * time.Second,
				start: func(target string) <-chan error {
					sender := exec.Command("node", "sender.js", target, strconv.Itoa(drones), strconv.Itoa(count), strconv.Itoa(rate), sentLog)
					sender.Dir = nodeDir
					sender.Stderr = os.Stderr
					if err := sender.Start(); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { sender.Process.Kill() })
					done := make(chan error, 1)
					go func() { done <- sender.Wait() }()
					return done
				},
				sent:  func() (map[string]sentFrame, map[int]int) { return readSentLog(t, sentLog) },
				count: map[int]int{1: count, 2: count, 3: count},
			})
		})
	}
}

// TestTlogThroughKillsAndCuts: the tlog gomavlib wrote (testdata/mavlink)
// replayed with `edge-agent replay --tlog` at twice its speed over UDP,
// through a link the test cuts and an agent it SIGKILLs: the same checks
// as for node-mavlink.
func TestTlogThroughKillsAndCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 10 s fault test")
	}
	src := filepath.Join("..", "..", "testdata", "mavlink", "flight.tlog")
	entries := readTlogFile(t, src)
	byHex, last, count := map[string]sentFrame{}, map[int]int{}, map[int]int{}
	for _, e := range entries {
		sys := int(e.Frame[map[bool]int{true: 5, false: 3}[e.Frame[0] == 0xFD]])
		h := hex.EncodeToString(e.Frame)
		if _, dup := byHex[h]; dup {
			t.Fatalf("the tlog holds the same frame twice (%s): frames would not be told apart", h)
		}
		byHex[h] = sentFrame{sys, count[sys]}
		last[sys] = count[sys]
		count[sys]++
	}
	throughFaults(t, "udp", faultSender{
		runFor: 10 * time.Second,
		start: func(target string) <-chan error {
			done := make(chan error, 1)
			go func() {
				done <- runReplay(context.Background(), []string{"--tlog", src, "--to", "udp://" + strings.TrimPrefix(target, "udp:"),
					"--speed", "2", "--quiet"}, io.Discard, io.Discard)
			}()
			return done
		},
		sent:  func() (map[string]sentFrame, map[int]int) { return byHex, last },
		count: count,
	})
}

// faultSender is a sender of throughFaults.
type faultSender struct {
	// runFor is about how long it sends.
	runFor time.Duration
	// start starts it towards target (the link's address); the channel
	// gives its end.
	start func(target string) <-chan error
	// sent gives, once it ended, each frame it wrote (hex → system id and
	// index among the system's frames) and the last index per system.
	sent func() (map[string]sentFrame, map[int]int)
	// count is the number of frames per system id.
	count map[int]int
}

// link is a cuttable link between the sender and the agent.
type link interface {
	addr() string
	cut()
	cutCount() int
}

// tcpLink is the TCP link: a cut resets every connection, the bytes in
// flight lost, as a radio link drops.
type tcpLink struct{ *testkit.Proxy }

func (l tcpLink) addr() string  { return l.Addr() }
func (l tcpLink) cut()          { l.Reset() }
func (l tcpLink) cutCount() int { return int(l.Cuts()) }

// udpLink forwards datagrams to the agent, dropping them all during a cut.
type udpLink struct {
	pc       *net.UDPConn
	mu       gosync.Mutex
	dropTill time.Time
	cuts     int
}

func newUDPLink(t *testing.T, target string) *udpLink {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	to, _ := net.ResolveUDPAddr("udp", target)
	out, err := net.ListenUDP("udp", nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &udpLink{pc: pc}
	t.Cleanup(func() { pc.Close(); out.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := pc.Read(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			drop := time.Now().Before(l.dropTill)
			l.mu.Unlock()
			if !drop {
				out.WriteToUDP(buf[:n], to)
			}
		}
	}()
	return l
}

func (l *udpLink) addr() string { return "udp:" + l.pc.LocalAddr().String() }
func (l *udpLink) cut() {
	l.mu.Lock()
	l.dropTill = time.Now().Add(300 * time.Millisecond)
	l.cuts++
	l.mu.Unlock()
}
func (l *udpLink) cutCount() int { l.mu.Lock(); defer l.mu.Unlock(); return l.cuts }

// throughFaults runs `edge-agent run` with a MAVLink server on network
// (system 1 mapped to drone-a), sends through a cuttable link, SIGKILLs
// and restarts the agent three times and cuts the link twice in the first
// 60 % of the run, then checks the centre: every frame one the sender
// wrote, byte for byte, per drone in order, none twice, every loss before
// an event flagged discontinuity, and every frame after the last fault.
func throughFaults(t *testing.T, network string, snd faultSender) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 25))
	dir := t.TempDir()
	csrv := rigs.StartCentral(t, central.Config{DataDir: filepath.Join(dir, "central")})
	httpPort, mavPort := freePort(t), freeUDPPort(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: mav-kill
data_dir: %s
http: {listen: "127.0.0.1:%d"}
log: {level: warn}
store: {min_free_bytes: 16777216}
video: {enabled: false}
telemetry: {enabled: false}
mavlink: {enabled: true, %s: "127.0.0.1:%d", drones: {1: drone-a}%s}
central: {url: %q, shutdown_timeout: 10s}
devices: {disk: {retain_below: 64MiB, shed_below: 32MiB}}
`, filepath.Join(dir, "agent"), httpPort, network+"_listen", mavPort, map[string]string{"tcp": `, udp_listen: ""`, "udp": ""}[network], csrv.ClientURL())), 0o644)
	start := func() *exec.Cmd {
		cmd := startRun(t, cfgPath, httpPort)
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}
	cmd := start()
	var proxy link
	if network == "tcp" {
		proxy = tcpLink{testkit.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", mavPort), testkit.ProxyHooks{})}
	} else {
		proxy = newUDPLink(t, fmt.Sprintf("127.0.0.1:%d", mavPort))
	}

	senderDone := snd.start(proxy.addr())

	// Faults in the first 60 % of the run: two cuts and three kills, in a
	// random order at random times; then the run ends cleanly.
	faults := []string{"cut", "cut", "kill", "kill", "kill"}
	rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	runFor := snd.runFor
	kills := 0
	for _, f := range faults {
		time.Sleep(runFor*6/10/time.Duration(len(faults)) + time.Duration(rng.IntN(200))*time.Millisecond) // the fault's random moment
		switch f {
		case "cut":
			proxy.cut()
		case "kill":
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if !testkit.KilledBySIGKILL(cmd) {
				t.Fatalf("agent not killed: %v", cmd.ProcessState)
			}
			kills++
			cmd = start()
		}
	}
	select {
	case err := <-senderDone:
		if err != nil {
			t.Fatalf("sender: %v", err)
		}
	case <-time.After(2*runFor + 30*time.Second):
		t.Fatal("sender did not finish")
	}
	// The last frames reach the agent: its MAVLink counts hold still.
	testkit.Settle(500*time.Millisecond, 30*time.Second, func() uint64 {
		s, _ := agentStatus(httpPort)
		if s.MAVLink == nil {
			return 0
		}
		return s.MAVLink.Datagrams + s.MAVLink.Frames + s.MAVLink.Stored
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v (want exit status 0)", err)
	}

	byHex, last := snd.sent()
	nc, err := nats.Connect(csrv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	items, err := centralread.ReadAll(context.Background(), nc, "telemetry", centralread.ReadOptions{Agent: "mav-kill"})
	if err != nil {
		t.Fatal(err)
	}
	droneOf := map[int]string{}
	for sys := range snd.count {
		droneOf[sys] = mavlink.DiscoveredID(uint8(sys))
	}
	droneOf[1] = "drone-a"
	next := map[int]int{} // per sysid: the next index expected
	seen := map[int]int{}
	gaps := 0
	for _, it := range items {
		if it.Kind != centralread.ItemEvent {
			continue
		}
		r := it.Event.Record
		if r.ContentType != mavlink.ContentType {
			t.Fatalf("event %v: content type %q", r.Position, r.ContentType)
		}
		sf, ok := byHex[hex.EncodeToString(r.Payload)]
		if !ok {
			t.Fatalf("event %v of %s: % x is no frame the sender wrote", r.Position, r.RoutingKey, r.Payload)
		}
		if droneOf[sf.sysid] != r.RoutingKey {
			t.Fatalf("frame of system %d stored as drone %q", sf.sysid, r.RoutingKey)
		}
		exp, started := next[sf.sysid]
		switch {
		case started && sf.index < exp:
			t.Fatalf("drone %s: frame %d after frame %d: duplicate or out of order", r.RoutingKey, sf.index, exp-1)
		case started && sf.index > exp:
			gaps++
			if !r.Flags.Has(localstream.FlagDiscontinuity) {
				t.Fatalf("drone %s: frames %d..%d lost before frame %d, which is not flagged discontinuity", r.RoutingKey, exp, sf.index-1, sf.index)
			}
		}
		next[sf.sysid] = sf.index + 1
		seen[sf.sysid]++
	}
	for sys, count := range snd.count {
		if next[sys] != count || last[sys] != count-1 {
			t.Fatalf("system %d: the centre ends at frame %d, the sender wrote up to %d of %d", sys, next[sys]-1, last[sys], count)
		}
		t.Logf("drone %s: %d of %d frames at the centre", droneOf[sys], seen[sys], count)
	}
	t.Logf("%s: %d kills, %d cuts, %d gaps flagged", network, kills, proxy.cutCount(), gaps)
	if kills != 3 || proxy.cutCount() < 1 || gaps == 0 {
		t.Fatalf("the faults did not happen: %d kills, %d cuts, %d gaps", kills, proxy.cutCount(), gaps)
	}
}

// freeUDPPort returns a port free for both TCP and UDP on 127.0.0.1.
func freeUDPPort(t *testing.T) int {
	for {
		p := freePort(t)
		if c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}); err == nil {
			c.Close()
			return p
		}
	}
}
