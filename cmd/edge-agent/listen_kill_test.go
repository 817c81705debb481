package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// orderedStore is paho's memory store whose All lists the outbound
// messages in packet id order. paho resends a persistent session's
// in-flight messages after a reconnect in All's order — a map's, random,
// for the memory store — and completes the original publish token when
// the resend takes the packet id over, before it is acked: killPub.run
// waits for the message to leave the store (its PUBACK) instead, so each
// drone has one message in flight. The ids are issued in increasing
// order (this test never wraps them), so id order is publish order.
type orderedStore struct{ *paho.MemoryStore }

func (s orderedStore) All() []string {
	keys := s.MemoryStore.All()
	id := func(k string) int { n, _ := strconv.Atoi(k[strings.IndexByte(k, '.')+1:]); return n }
	slices.SortFunc(keys, func(a, b string) int { return id(a) - id(b) })
	return keys
}

// killPub publishes seqs 1..n for each of its drones on one persistent
// session, one message in flight per drone at a time.
type killPub struct {
	c          paho.Client
	store      orderedStore
	drones     []string
	sent, done atomic.Int64
	// writeErrors counts publishes whose write the kill broke.
	writeErrors atomic.Int64
}

func newKillPub(t *testing.T, addr, client string, drones ...string) *killPub {
	store := orderedStore{paho.NewMemoryStore()}
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(client).SetCleanSession(false).
		SetStore(store).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(100 * time.Millisecond).SetMaxReconnectInterval(200 * time.Millisecond).
		SetKeepAlive(5 * time.Second).SetWriteTimeout(10 * time.Second)
	p := &killPub{c: paho.NewClient(o), store: store, drones: drones}
	p.c.Connect() // retries until the agent listens
	t.Cleanup(func() { p.c.Disconnect(50) })
	return p
}

func (p *killPub) run(n int) error {
	var wg gosync.WaitGroup
	errs := make(chan error, len(p.drones))
	for _, d := range p.drones {
		wg.Go(func() {
			for seq := 1; seq <= n; seq++ {
				b, _ := json.Marshal(mqttsim.Telemetry{Drone: d, Seq: uint64(seq), Timestamp: time.Now().UnixMilli()})
				p.sent.Add(1)
				tok := p.c.Publish("drones/"+d+"/telemetry", 1, false, b)
				if !tok.WaitTimeout(2 * time.Minute) {
					errs <- fmt.Errorf("%s seq %d: no ack", d, seq)
					return
				}
				err := tok.Error()
				if err != nil {
					// The kill broke the write: paho fails the token but
					// keeps the message in the session's store and resends
					// it (DUP) after the reconnect.
					var ne net.Error
					var op *net.OpError
					if !errors.As(err, &ne) && !errors.As(err, &op) {
						errs <- fmt.Errorf("%s seq %d: %w", d, seq, err)
						return
					}
					p.writeErrors.Add(1)
				}
				// A token is also complete, without an error, when paho's
				// resume after a reconnect takes its packet id over for the
				// resend — before the resend is even written, so the next
				// seq could overtake it. paho deletes a message from the
				// session's store at its PUBACK: the next seq waits for
				// that (one message in flight per drone).
				key := fmt.Sprintf("o.%d", tok.(*paho.PublishToken).MessageID())
				if !testkit.UntilEvery(2*time.Minute, time.Millisecond, func() bool { return p.store.Get(key) == nil }) {
					errs <- fmt.Errorf("%s seq %d: never acked (write error %v)", d, seq, err)
					return
				}
				p.done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestRunListenKilledWhilePublishing: drones publish straight to
// `edge-agent run --mqtt-listen` (no broker) on persistent sessions; the
// agent is SIGKILLed mid-stream and restarted several times, the
// publishers resend what was not acked (DUP); at the end every message is
// stored exactly once, in order per drone.
func TestRunListenKilledWhilePublishing(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	httpPort, mqttPort := freePort(t), freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", mqttPort)
	cfgPath := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`agent_id: listen-kill
data_dir: %s
http: {listen: "127.0.0.1:%d"}
log: {level: warn}
video: {enabled: false}
central: {url: ""}
`, filepath.Join(dir, "agent"), httpPort)), 0o644)
	start := func() *exec.Cmd {
		cmd := startRun(t, cfgPath, httpPort, "--mqtt-listen", addr)
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}

	const n = 1500
	cmd := start()
	pubs := []*killPub{newKillPub(t, addr, "pub-a", "a1", "a2"), newKillPub(t, addr, "pub-b", "b1", "b2")}
	want := map[string]int{"a1": n, "a2": n, "b1": n, "b2": n}
	pubErr := make(chan error, len(pubs))
	for _, p := range pubs {
		go func() { pubErr <- p.run(n) }()
	}
	progress := func() (done, inFlight int64) {
		for _, p := range pubs {
			d := p.done.Load()
			done += d
			inFlight += p.sent.Load() - d
		}
		return done, inFlight
	}
	killedMidStream := 0
	for kill := range 3 {
		before, _ := progress()
		if !testkit.UntilEvery(30*time.Second, 10*time.Millisecond, func() bool { d, _ := progress(); return d >= before+200 }) { // the agent is storing and acking
			t.Fatalf("kill %d: no progress", kill)
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // the kill's random moment
		cmd.Process.Signal(syscall.SIGKILL)
		_, inFlight := progress()
		cmd.Wait()
		if !testkit.KilledBySIGKILL(cmd) {
			t.Fatalf("kill %d: agent not killed: %v", kill, cmd.ProcessState)
		}
		done, _ := progress()
		if inFlight > 0 && done < 4*n {
			killedMidStream++
		}
		t.Logf("kill %d: %d of %d acked, %d in flight at the kill", kill, done, 4*n, inFlight)
		cmd = start()
	}
	for range pubs {
		if err := <-pubErr; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d publishes failed their write at a kill (resent by the session)", pubs[0].writeErrors.Load()+pubs[1].writeErrors.Load())
	if killedMidStream < 2 {
		t.Fatalf("only %d kills with messages in flight: the test proved too little", killedMidStream)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v (want exit status 0)", err)
	}
	recs := storedRecords(t, filepath.Join(dir, "agent", "store"))
	next := map[string]int{}
	seqs := map[string][]int{}
	for _, r := range recs {
		var m mqttsim.Telemetry
		if err := json.Unmarshal(r.Payload, &m); err != nil {
			t.Fatal(err)
		}
		seqs[m.Drone] = append(seqs[m.Drone], int(m.Seq))
	}
	for _, r := range recs {
		var m mqttsim.Telemetry
		json.Unmarshal(r.Payload, &m)
		if int(m.Seq) != next[m.Drone]+1 {
			s := seqs[m.Drone]
			i := slices.Index(s, next[m.Drone]+1)
			t.Fatalf("drone %s: seq %d after %d (duplicate, gap or reorder); seq %d stored at index %d of %d; around: %v",
				m.Drone, m.Seq, next[m.Drone], next[m.Drone]+1, i, len(s), s[max(0, slices.Index(s, int(m.Seq))-3):min(len(s), slices.Index(s, int(m.Seq))+4)])
		}
		next[m.Drone] = int(m.Seq)
	}
	for d, w := range want {
		if next[d] != w {
			t.Fatalf("drone %s: stored up to %d, want %d", d, next[d], w)
		}
	}
	t.Logf("%d records, %d kills mid-stream", len(recs), killedMidStream)
}
