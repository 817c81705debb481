package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// listenConfig is a listener-only configuration on a free port.
func listenConfig() Config {
	cfg := NewDefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.ConnectTimeout = 2 * time.Second
	return cfg
}

// startListener runs a listener-only ingester over a real store and
// returns it once it listens.
func startListener(t testing.TB, cfg Config, s *localstream.Store, st Appender, marks Marks) (*Ingester, func() error) {
	t.Helper()
	in, stop := runIngester(t, cfg, s, st, marks)
	select {
	case <-in.Subscribed():
	case <-time.After(10 * time.Second):
		t.Fatalf("not listening: %v", stop())
	}
	return in, stop
}

// durableLog wraps the stream and records each (drone, seq) when its
// append is durable, before the ingester hears of it: a PUBACK that
// arrives at a publisher before its message is recorded here was sent
// before the append was durable.
type durableLog struct {
	st *localstream.Stream
	mu sync.Mutex
	// seen maps "drone/seq" to how often it became durable.
	seen map[string]int
}

func (d *durableLog) AppendAsync(ctx context.Context, ev localstream.Event, cb func(localstream.Position, error), opts ...localstream.AppendOption) error {
	return d.st.AppendAsync(ctx, ev, func(p localstream.Position, err error) {
		if err == nil {
			var m mqttsim.Telemetry
			if json.Unmarshal(ev.Payload, &m) == nil {
				d.mu.Lock()
				d.seen[fmt.Sprintf("%s/%d", m.Drone, m.Seq)]++
				d.mu.Unlock()
			}
		}
		cb(p, err)
	}, opts...)
}

func (d *durableLog) durable(drone string, seq uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[fmt.Sprintf("%s/%d", drone, seq)] > 0
}

// listenPub is a real paho publisher for several drones on one connection:
// persistent session (unless clean), QoS 1, each drone's messages in
// order with one in flight (paho resends a persistent session's in-flight
// messages after a reconnect, with DUP, in no particular order: one in
// flight per drone keeps each drone's order).
type listenPub struct {
	c      paho.Client
	drones []string
}

func newListenPub(t testing.TB, addr, client string, clean bool, drones ...string) *listenPub {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(client).SetCleanSession(clean).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond).
		SetMaxReconnectInterval(300 * time.Millisecond).SetKeepAlive(5 * time.Second).SetWriteTimeout(10 * time.Second)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", client, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return &listenPub{c: c, drones: drones}
}

// publish sends seqs first..last for each drone, concurrently across
// drones; acked is called after each PUBACK. It returns the first error.
func (p *listenPub) publish(first, last uint64, acked func(drone string, seq uint64)) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(p.drones))
	for _, d := range p.drones {
		wg.Go(func() {
			for seq := first; seq <= last; seq++ {
				b, _ := json.Marshal(mqttsim.Telemetry{Drone: d, Seq: seq, Timestamp: time.Now().UnixMilli(), Mode: "AUTO"})
				tok := p.c.Publish("drones/"+d+"/telemetry", 1, false, b)
				if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
					errs <- fmt.Errorf("%s seq %d: %v", d, seq, tok.Error())
					return
				}
				if acked != nil {
					acked(d, seq)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestListenerStoresEveryMessageOnce: real paho publishers, several drones
// on one connection and several connections, straight into the listener
// with a real Badger store: every message stored once, in order per drone,
// and no PUBACK before the append is durable.
func TestListenerStoresEveryMessageOnce(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	log := &durableLog{st: st, seen: map[string]int{}}
	in, stop := startListener(t, listenConfig(), s, log, nil)
	addr := in.ListenAddr().String()

	const conns, perConn, n = 3, 2, 300
	want := map[string]uint64{}
	var early sync.Map
	var wg sync.WaitGroup
	for c := range conns {
		var drones []string
		for d := range perConn {
			name := fmt.Sprintf("d%d-%d", c, d)
			drones = append(drones, name)
			want[name] = n
		}
		pub := newListenPub(t, addr, fmt.Sprintf("pub-%d", c), false, drones...)
		wg.Go(func() {
			err := pub.publish(1, n, func(d string, seq uint64) {
				if !log.durable(d, seq) {
					early.Store(fmt.Sprintf("%s/%d", d, seq), true)
				}
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	early.Range(func(k, _ any) bool { t.Errorf("PUBACK before durable: %v", k); return true })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if msg := verifyExactlyOnce(readAll(t, st), want); msg != "" {
		t.Fatal(msg)
	}
	stats := in.Stats()
	if stats.Appended != conns*perConn*n || stats.ListenerConnects != conns {
		t.Fatalf("stats: %+v", stats)
	}
}

// TestListenerBoundNotRun: a listener bound (Bind) whose Run returns at
// once (ctx already done) releases its port.
func TestListenerBoundNotRun(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, err := New(listenConfig(), Sink{Stream: st, Meta: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Bind(); err != nil {
		t.Fatal(err)
	}
	addr := in.ListenAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := in.Run(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still held: %v", err)
	}
	ln.Close()
}

// TestListenerAcksInPublishOrder: the lanes take turns (32 per drone per
// round), so appends complete out of the connection's order; its PUBACKs
// still go out in the order its PUBLISHes came (MQTT 3.1.1 §4.6.0-2).
func TestListenerAcksInPublishOrder(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, _ := startListener(t, listenConfig(), s, slowAppender{st, 300 * time.Microsecond}, nil)
	c := dialRaw(t, in.ListenAddr().String())
	if rawConnect(t, c, "order", false, 30, nil) != packets.Accepted {
		t.Fatal("refused")
	}
	var buf bytes.Buffer
	var sent []uint16
	id := uint16(0)
	for _, drone := range []string{"a", "b", "a", "b", "c"} {
		for range 50 {
			id++
			p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
			p.TopicName, p.Qos, p.MessageID = "drones/"+drone+"/telemetry", 1, id
			p.Payload = fmt.Appendf(nil, `{"drone":%q,"id":%d}`, drone, id)
			p.Write(&buf)
			sent = append(sent, id)
		}
	}
	c.Write(buf.Bytes()) // all at once: the lanes fill before the store drains them
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i, want := range sent {
		p, err := packets.ReadPacket(c)
		if err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
		if got := p.(*packets.PubackPacket).MessageID; got != want {
			t.Fatalf("ack %d is for %d, want %d (publish order)", i, got, want)
		}
	}
}

// TestListenerStopAcksWhatIsStored: stopped while appends are queued, the
// listener stops reading, lets the queued appends become durable, sends
// their PUBACKs and only then closes: the publisher holds a PUBACK for
// exactly the messages stored (one drone: they are a prefix), none for the
// rest, which it will resend.
func TestListenerStopAcksWhatIsStored(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, stop := startListener(t, listenConfig(), s, slowAppender{st, time.Millisecond}, nil)
	c := dialRaw(t, in.ListenAddr().String())
	if rawConnect(t, c, "stopper", false, 30, nil) != packets.Accepted {
		t.Fatal("refused")
	}
	var buf bytes.Buffer
	const n = 2000
	for id := uint16(1); id <= n; id++ {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID = "drones/s/telemetry", 1, id
		p.Payload = fmt.Appendf(nil, `{"id":%d}`, id)
		p.Write(&buf)
	}
	c.Write(buf.Bytes())
	testkit.WaitFor(t, 10*time.Second, "appends under way", func() bool { return in.Stats().Appended > 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var acked []uint16
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		p, err := packets.ReadPacket(c)
		if err != nil {
			break // closed after the last ack
		}
		acked = append(acked, p.(*packets.PubackPacket).MessageID)
	}
	recs := readAll(t, st)
	if len(acked) != len(recs) || len(recs) == n {
		t.Fatalf("%d acked, %d stored of %d: want every stored one acked, and a stop mid-stream", len(acked), len(recs), n)
	}
	for i, id := range acked {
		if id != uint16(i+1) || string(recs[i].Payload) != fmt.Sprintf(`{"id":%d}`, id) {
			t.Fatalf("ack %d is for %d, record %s", i, id, recs[i].Payload)
		}
	}
	t.Logf("stopped with %d of %d stored and acked", len(recs), n)
}
