package telemetry

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

func wantDrones(drones int, n uint64) map[string]uint64 {
	want := map[string]uint64{}
	for i := 1; i <= drones; i++ {
		want[mqttsim.Config{}.DroneName(i)] = n
	}
	return want
}

// TestBrokerRestartLosesNothing: the broker restarts (SIGTERM, persistence
// on) while the agent is draining a backlog; then more is published. Every
// message is stored exactly once, in order.
func TestBrokerRestartLosesNothing(t *testing.T) {
	b := startBroker(t)
	if b.Embedded() {
		t.Skip("the embedded fallback broker keeps no state across restarts; this test needs mosquitto")
	}
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-restart")
	subscribeOnce(t, b.URL(), cfg.ClientID, "drones/+/telemetry/#", "drones/+/status")
	const drones, n = 3, 3000
	ctx := context.Background()
	if _, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, Window: 32, NoStatus: true}); err != nil {
		t.Fatal(err)
	}
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "draining started", func() bool { return in.Stats().Appended > 0 })
	if err := b.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	atRestart := in.Stats().Appended
	t.Logf("broker restarted with %d of %d appended", atRestart, drones*n)
	if atRestart >= drones*n {
		t.Fatal("backlog drained before the restart: the restart proved nothing")
	}
	if _, err := mqttsim.Simulate(ctx, mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, FirstSeq: n + 1, Window: 32, NoStatus: true}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "all appended", func() bool { return in.Stats().Appended >= 2*drones*n })
	time.Sleep(200 * time.Millisecond) // a window for stray redeliveries (no event to wait on): one stored would fail below
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	t.Logf("stats: connects %d, lost %d, duplicates skipped %d", got.Connects, got.ConnectionLost, got.DuplicatesSkipped)
	if got.ConnectionLost == 0 || got.Connects < 2 {
		t.Fatalf("the agent never saw the restart: %+v", got)
	}
	if msg := verifyExactlyOnce(readAll(t, st), wantDrones(drones, 2*n)); msg != "" {
		t.Fatal(msg)
	}
}

// TestNetworkCutLosesNothing: a proxy between agent and broker cuts the link
// (closing live connections and refusing new ones) while the simulator keeps
// publishing; nothing is lost or duplicated.
func TestNetworkCutLosesNothing(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	b := startBroker(t)
	px := testkit.NewProxy(t, b.Addr(), testkit.ProxyHooks{})
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig("tcp://"+px.Addr(), "agent-cut")
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "connect", func() bool { return in.Stats().Connects > 0 })

	const drones = 3
	n := 400 * testkit.Rounds(2)
	simDone := make(chan error, 1)
	go func() {
		_, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, Rate: 400, Window: 4, NoStatus: true})
		simDone <- err
	}()
	cuts := testkit.Rounds(2)
	for i := 0; i < cuts; i++ {
		testkit.WaitFor(t, 15*time.Second, "agent connected", func() bool { return in.Stats().Connects == uint64(i+1) })
		time.Sleep(time.Duration(150+rng.IntN(300)) * time.Millisecond) // the cut comes at a random point of the flow
		before := in.Stats()
		px.SetDown(true)
		time.Sleep(time.Duration(300+rng.IntN(500)) * time.Millisecond) // the outage lasts this long
		during := in.Stats()
		px.SetDown(false)
		t.Logf("cut %d: appended %d -> %d during the cut", i, before.Appended, during.Appended)
	}
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "all appended", func() bool { return in.Stats().Appended >= uint64(drones*n) })
	time.Sleep(200 * time.Millisecond) // a window for stray redeliveries (no event to wait on): one stored would fail below
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	t.Logf("proxy: cuts that broke connections %d, refused %d; agent: lost %d, connects %d, duplicates skipped %d",
		px.Cuts(), px.Refused(), got.ConnectionLost, got.Connects, got.DuplicatesSkipped)
	if px.Cuts() == 0 || got.ConnectionLost < uint64(cuts) {
		t.Fatalf("the cut did not happen: cuts that broke connections %d, lost %d", px.Cuts(), got.ConnectionLost)
	}
	if msg := verifyExactlyOnce(readAll(t, st), wantDrones(drones, uint64(n))); msg != "" {
		t.Fatal(msg)
	}
}

// TestLinkGoesDarkLosesNothing: the link between agent and broker silently
// stops forwarding (no RST, new connections as dark) for longer than the
// keep-alive while the simulator keeps publishing; the agent detects it by
// its keep-alive, reconnects after the link returns, and loses nothing.
func TestLinkGoesDarkLosesNothing(t *testing.T) {
	b := startBroker(t)
	dark := newDarkLink()
	px := testkit.NewProxy(t, b.Addr(), testkit.ProxyHooks{Chunk: dark.chunk})
	t.Cleanup(dark.open) // before the proxy closes: no pipe stays held
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig("tcp://"+px.Addr(), "agent-dark")
	cfg.KeepAlive = time.Second
	in, stop := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "connect", func() bool { return in.Stats().Connects > 0 })

	const drones, n = 2, 1500
	simDone := make(chan error, 1)
	go func() {
		_, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, Rate: 300, Window: 4, NoStatus: true})
		simDone <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "flowing", func() bool { return in.Stats().Appended > 200 })
	dark.stall()
	stalledAt := in.Stats()
	testkit.WaitFor(t, 15*time.Second, "keep-alive notices the dead link", func() bool { return in.Stats().ConnectionLost > 0 })
	during := in.Stats()
	time.Sleep(500 * time.Millisecond) // the link stays dark past the loss: the outage is the test
	px.Cut()                           // connections that lived through the stall are dropped: both ends have given up on them
	dark.open()
	t.Logf("dark link: appended %d at the stall, %d when the loss was noticed; chunks held %d", stalledAt.Appended, during.Appended, dark.held.Load())
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "all appended", func() bool { return in.Stats().Appended >= drones*n })
	time.Sleep(200 * time.Millisecond) // a window for stray redeliveries (no event to wait on): one stored would fail below
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	t.Logf("agent: lost %d, connects %d, duplicates skipped %d", got.ConnectionLost, got.Connects, got.DuplicatesSkipped)
	if dark.stalls.Load() != 1 || dark.held.Load() == 0 || got.Connects < 2 || got.ConnectionLost == 0 {
		t.Fatalf("the stall did not happen as intended: %+v", got)
	}
	if msg := verifyExactlyOnce(readAll(t, st), wantDrones(drones, n)); msg != "" {
		t.Fatal(msg)
	}
}

// darkLink is a testkit.Proxy Chunk hook for a link that goes dark: after
// stall, every chunk (of open and new connections) is held, nothing closed,
// no RST, until open.
type darkLink struct {
	mu   sync.Mutex
	gate chan struct{} // closed while forwarding is allowed; replaced by stall
	// stalls counts stall calls; held counts chunks held back by a stall.
	stalls, held atomic.Int64
}

func newDarkLink() *darkLink {
	d := &darkLink{gate: make(chan struct{})}
	close(d.gate)
	return d
}

func (d *darkLink) chunk(_ bool, b []byte) ([]byte, bool) {
	d.mu.Lock()
	gate := d.gate
	d.mu.Unlock()
	select {
	case <-gate:
	default:
		d.held.Add(1) // traffic sent into the dark link
		<-gate
	}
	return b, false
}

func (d *darkLink) stall() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stalls.Add(1)
	d.gate = make(chan struct{})
}

func (d *darkLink) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.gate:
	default:
		close(d.gate)
	}
}
