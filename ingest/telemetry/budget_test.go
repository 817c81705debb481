package telemetry

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// gatedStream is the real stream behind a gate: AppendAsync waits while it
// is shut, as a store whose queue is full does (a fake only for that
// timing; TestHostileNeighbours floods a real store).
type gatedStream struct {
	st   *localstream.Stream
	once sync.Once
	open chan struct{}
}

func (g *gatedStream) AppendAsync(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.st.AppendAsync(ctx, ev, cb, opts...)
}

func (g *gatedStream) release() { g.once.Do(func() { close(g.open) }) }

func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestBufferedBytesBounded (issue 30.4): while the store takes nothing,
// four clients write 65,000-byte QoS 1 messages to the listener as fast
// as TCP takes them. The intake holds at most max_buffered_bytes of them
// (plus what the kernel's socket buffers hold): it stops reading. On main
// only the count was bounded — 4,096 messages in the lanes, 266 MB — and
// the heap grew by as much.
func TestBufferedBytesBounded(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	g := &gatedStream{st: st, open: make(chan struct{})}
	defer g.release()
	cfg := listenConfig()
	in, stop := startListener(t, cfg, s, g, nil)
	addr := in.ListenAddr().String()
	before := liveHeap()
	var wg sync.WaitGroup
	var conns []io.Closer
	for k := range 4 {
		c := dialRaw(t, addr)
		conns = append(conns, c)
		if code := rawConnect(t, c, fmt.Sprintf("big-%d", k), true, 60, nil); code != 0 {
			t.Fatalf("connack %d", code)
		}
		go io.Copy(io.Discard, c)
		pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		pub.Qos, pub.TopicName, pub.MessageID = 1, fmt.Sprintf("drones/big-%d/telemetry", k), 1
		pub.Payload = make([]byte, 65_000)
		var b strings.Builder
		pub.Write(&b)
		wire := []byte(b.String())
		wg.Go(func() {
			for { // blocks while the intake does not read; closed below
				if _, err := c.Write(wire); err != nil {
					return
				}
			}
		})
	}
	// Flat out until the intake stops reading: it waits for budget, and
	// received stays put (both asserted below).
	testkit.Until(10*time.Second, func() bool { return in.Stats().BudgetWaits > 0 })
	testkit.Settle(100*time.Millisecond, 10*time.Second, func() uint64 { return in.Stats().Received })
	grown := int64(liveHeap()) - int64(before)
	got := in.Stats()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	t.Logf("received %d messages of 65,000 bytes while the store took none; live heap grew by %d MiB", got.Received, grown>>20)
	if bound := int64(cfg.MaxBufferedBytes) + 16<<20; grown > bound {
		t.Fatalf("the live heap grew by %d MiB with the store taking nothing (bound %d MiB)", grown>>20, bound>>20)
	}
	if got.BufferedBytes > int64(cfg.MaxBufferedBytes) || got.BudgetWaits == 0 {
		t.Fatalf("buffered %d bytes (bound %d), %d budget waits", got.BufferedBytes, cfg.MaxBufferedBytes, got.BudgetWaits)
	}
	g.release()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestStalledDeliveryReported: while the store takes nothing and the lanes
// are full, a delivery waits; once it waited 10 s Problems (/healthz) says
// delivery is stalled, naming lane_depth — not before.
func TestStalledDeliveryReported(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	g := &gatedStream{st: st, open: make(chan struct{})}
	defer g.release()
	cfg := listenConfig()
	cfg.LaneDepth = 4
	in, stop := startListener(t, cfg, s, g, nil)
	pub := newListenPub(t, in.ListenAddr().String(), "p", true)
	for seq := 1; seq <= 8; seq++ {
		pub.c.Publish("drones/d/telemetry", 0, false, fmt.Sprintf(`{"drone":"d","seq":%d}`, seq))
	}
	testkit.WaitFor(t, 10*time.Second, "a delivery waiting for lane space", func() bool { return in.Stats().LaneFullWaits > 0 })
	if p := in.Problems(time.Now()); len(p) != 0 {
		t.Fatalf("problems at once: %q", p)
	}
	if p := strings.Join(in.Problems(time.Now().Add(11*time.Second)), "; "); !strings.Contains(p, "delivery stalled") || !strings.Contains(p, "lane_depth 4") {
		t.Fatalf("problems 11 s on: %q", p)
	}
	g.release()
	testkit.WaitFor(t, 10*time.Second, "all stored", func() bool { return in.Stats().Appended == 8 })
	if p := in.Problems(time.Now().Add(11 * time.Second)); len(p) != 0 {
		t.Fatalf("problems after the store took them: %q", p)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
