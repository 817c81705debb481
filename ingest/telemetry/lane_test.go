package telemetry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// deliveredMsg is a message as paho hands it over (the MQTT client is not
// under test here; the lanes and the dispatcher are).
type deliveredMsg struct {
	topic   string
	payload []byte
	id      uint16
	acked   *atomic.Int64
	// onAck, if set, runs at the PUBACK.
	onAck func()
}

func (m *deliveredMsg) Duplicate() bool   { return false }
func (m *deliveredMsg) Qos() byte         { return 1 }
func (m *deliveredMsg) Retained() bool    { return false }
func (m *deliveredMsg) Topic() string     { return m.topic }
func (m *deliveredMsg) MessageID() uint16 { return m.id }
func (m *deliveredMsg) Payload() []byte   { return m.payload }
func (m *deliveredMsg) Ack() {
	if m.onAck != nil {
		m.onAck()
	}
	m.acked.Add(1)
}

// TestBurstDoesNotStarveOtherDrones: drone A has 2000 messages waiting when
// drone B's 10 arrive; the dispatcher's round-robin puts B's events into the
// store within the first round (FIFO would put them after all of A's), and
// each drone's events stay in order. Every message is acked only after its
// event is durable.
func TestBurstDoesNotStarveOtherDrones(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig("tcp://127.0.0.1:1", "agent-fair")
	in, err := New(cfg, Sink{Stream: st, Meta: s})
	if err != nil {
		t.Fatal(err)
	}
	var acked, early atomic.Int64
	// Rule 1: at each PUBACK, at least as many events are durable (inside
	// the stream's tail cut) as messages have been acked, this one included.
	durable := func() int64 {
		var n uint64
		for _, off := range st.TailCut().Positions {
			n += off
		}
		return int64(n)
	}
	checkDurable := func() {
		if acked.Load()+1 > durable() {
			early.Add(1)
		}
	}
	const burst, few = 2000, 10
	id := uint16(0)
	msg := func(drone string, seq int) *deliveredMsg {
		id++
		return &deliveredMsg{topic: "drones/" + drone + "/telemetry",
			payload: fmt.Appendf(nil, `{"drone":%q,"seq":%d,"timestamp":%d}`, drone, seq, time.Now().UnixMilli()), id: id,
			acked: &acked, onAck: checkDurable}
	}
	// Deliver A's burst, then B's few, before the dispatcher runs.
	for i := 1; i <= burst; i++ {
		in.onMessage(nil, msg("a", i))
	}
	for i := 1; i <= few; i++ {
		in.onMessage(nil, msg("b", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg, ackWG sync.WaitGroup
	wg.Go(func() { in.dispatch(ctx) })
	ackWG.Go(in.ackLoop)
	testkit.WaitFor(t, 20*time.Second, "all appended and acked", func() bool { return acked.Load() >= burst+few })
	close(in.stopping)
	wg.Wait()
	close(in.ackStop)
	ackWG.Wait()

	if early.Load() != 0 {
		t.Fatalf("%d PUBACKs before their event was durable", early.Load())
	}
	recs := readAll(t, st)
	if msg := verifyExactlyOnce(recs, map[string]uint64{"a": burst, "b": few}); msg != "" {
		t.Fatal(msg)
	}
	lastB := -1
	for i, r := range recs {
		if r.RoutingKey == "b" {
			lastB = i
		}
	}
	if lastB >= 2*dispatchBurst+few {
		t.Fatalf("drone b's last event stored at index %d of %d: starved behind drone a's burst", lastB, len(recs))
	}
	t.Logf("drone b's %d events stored by index %d, drone a's burst of %d around them", few, lastB, burst)
}

type nilAppender struct{}

func (nilAppender) AppendAsync(context.Context, localstream.Event, func(localstream.Position, error), ...localstream.AppendOption) error {
	return nil
}

type nilMeta struct{}

func (nilMeta) ScanMeta(string) (map[string][]byte, error) { return nil, nil }
func (nilMeta) DeleteMetaKeys([]string) (int, error)       { return 0, nil }
