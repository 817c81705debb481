package mqttlisten

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// The scripts in testdata/*.txt are MQTT conversations with a Listener:
// raw MQTT 3.1.1 packets on real TCP sockets, a real Badger store for the
// sessions, and a recording Pipeline whose acks the script calls. They are
// github.com/cockroachdb/datadriven scripts, one harness per file; each
// step is
//
//	<command> [key=value ...]
//	----
//	<expected output, up to a blank line>
//
// Commands:
//
//	listen [max_payload=N] [max_connections=N]      a new Listener (the last one stopped)
//	       [per_source=N] [unconnected=N]
//	       [connect_timeout=DUR] [max_keep_alive=DUR]
//	dial c=NAME                                     a client connection (its packets read in the background)
//	connect c=NAME [client=ID] [clean=0|1]          send CONNECT
//	        [keep_alive=SECONDS] [level=N] [will=TOPIC] [will_payload=P]
//	publish c=NAME topic=T [qos=Q] [id=N]           send PUBLISH
//	        [dup=1] [retain=1] [payload=P] [size=N]  (size: N bytes of 'x')
//	pubrel|subscribe|unsubscribe c=NAME id=N        send that packet ([topic=F] for (un)subscribe)
//	pingreq|disconnect c=NAME                       send that packet
//	raw c=NAME hex=BYTES                            send these bytes
//	hangup c=NAME                                   the client closes its socket
//	recv c=NAME                                     the next packet the client gets (5 s at most), or "closed"
//	quiet c=NAME [for=DUR]                          nothing arrives for DUR (default 150ms): "quiet"
//	delivered [n=N]                                 wait for N more deliveries (default 1) and print them
//	undelivered [for=DUR]                           no delivery comes for DUR (default 200ms): "none"
//	ack i=N / refuse i=N                            the pipeline acks delivery N (refuse: m.Refuse() first)
//	reserve ok=0|1                                  Reserve answers false (a stopping pipeline) or true
//	connections n=N                                 wait until N connections are open
//	stats                                           the non-zero counters (no gauge)
//	problem                                         Problem within a minute ("" printed as none)
//	closestore                                      close the sessions' store (its next use fails)
//	failures                                        the errors the listener passed to Fail
//	stop                                            StopReading
//	closeall                                        CloseAll
//
// Run with -rewrite to rewrite the expected outputs (then review the diff).
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		// The stores' directory first: its removal is then the last cleanup.
		h := &harness{t: t, dir: t.TempDir(), clients: map[string]*client{}}
		t.Cleanup(h.stopListener)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			start := time.Now()
			out := h.run(d)
			if took := time.Since(start); took > 300*time.Millisecond {
				t.Logf("%s: %s took %s", d.Pos, d.Cmd, took.Round(time.Millisecond))
			}
			return out
		})
	})
}

// harness runs one script: a Listener, its recording pipeline, clients.
type harness struct {
	t       *testing.T
	l       *Listener
	p       *recorder
	store   *localstream.Store
	dir     string
	clients map[string]*client
	// shown is how many deliveries delivered printed.
	shown int
}

func (h *harness) run(td *datadriven.TestData) string {
	t := h.t
	cmd := td.Pos + " " + td.Cmd
	args := map[string]string{}
	for _, a := range td.CmdArgs {
		if len(a.Vals) != 1 {
			t.Fatalf("%s: argument %q is not key=value", cmd, a)
		}
		args[a.Key] = a.Vals[0]
	}
	num := func(k string, def int) int {
		v, ok := args[k]
		if !ok {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %s: %v", cmd, k, err)
		}
		return n
	}
	dur := func(k string, def time.Duration) time.Duration {
		v, ok := args[k]
		if !ok {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %s: %v", cmd, k, err)
		}
		return d
	}
	c := func() *client {
		cl := h.clients[args["c"]]
		if cl == nil {
			t.Fatalf("%s: no client %q", cmd, args["c"])
		}
		return cl
	}
	switch td.Cmd {
	case "listen":
		h.stopListener()
		h.listen(Config{
			Addr: "127.0.0.1:0", MaxConnections: num("max_connections", 16), MaxConnectionsPerSource: num("per_source", 16),
			MaxUnconnected: num("unconnected", 16), ConnectTimeout: dur("connect_timeout", 5*time.Second),
			MaxKeepAlive: dur("max_keep_alive", time.Minute), MaxPayload: num("max_payload", 1024),
		})
	case "dial":
		nc, err := net.Dial("tcp", h.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		h.clients[args["c"]] = newClient(nc)
	case "connect":
		p := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
		p.ProtocolName, p.ProtocolVersion = "MQTT", byte(num("level", 4))
		p.ClientIdentifier, p.CleanSession, p.Keepalive = args["client"], num("clean", 1) == 1, uint16(num("keep_alive", 30))
		if w, ok := args["will"]; ok {
			p.WillFlag, p.WillTopic, p.WillMessage, p.WillQos = true, w, []byte(args["will_payload"]), 1
		}
		c().send(p)
	case "publish":
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Payload = args["topic"], byte(num("qos", 0)), uint16(num("id", 0)), []byte(args["payload"])
		if n := num("size", -1); n >= 0 {
			p.Payload = bytes.Repeat([]byte{'x'}, n)
		}
		p.Dup, p.Retain = num("dup", 0) == 1, num("retain", 0) == 1
		c().send(p)
	case "pubrel":
		p := packets.NewControlPacket(packets.Pubrel).(*packets.PubrelPacket)
		p.MessageID = uint16(num("id", 1))
		c().send(p)
	case "subscribe":
		p := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
		p.MessageID, p.Topics, p.Qoss = uint16(num("id", 1)), []string{args["topic"]}, []byte{1}
		c().send(p)
	case "unsubscribe":
		p := packets.NewControlPacket(packets.Unsubscribe).(*packets.UnsubscribePacket)
		p.MessageID, p.Topics = uint16(num("id", 1)), []string{args["topic"]}
		c().send(p)
	case "pingreq":
		c().send(packets.NewControlPacket(packets.Pingreq))
	case "disconnect":
		c().send(packets.NewControlPacket(packets.Disconnect))
	case "raw":
		b, err := hex.DecodeString(args["hex"])
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		c().conn.Write(b)
	case "hangup":
		c().conn.Close()
	case "recv":
		return c().recv(5 * time.Second)
	case "quiet":
		return c().quiet(dur("for", 150*time.Millisecond))
	case "delivered":
		return h.delivered(num("n", 1))
	case "undelivered":
		<-time.After(dur("for", 200*time.Millisecond)) // an absence: nothing to wait on but the time
		if d := h.p.delivery(h.shown + 1); d != nil {
			h.shown++
			return d.String(h.shown)
		}
		return "none"
	case "ack", "refuse":
		d := h.p.delivery(num("i", 0))
		if d == nil {
			t.Fatalf("%s: no delivery %d", cmd, num("i", 0))
		}
		if td.Cmd == "refuse" {
			d.m.Refuse()
		}
		d.ack()
	case "reserve":
		h.p.refuseReserve.Store(num("ok", 1) == 0)
	case "connections":
		n := int64(num("n", 0))
		testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("%d connections", n), func() bool { return h.l.Stats().Connections == n })
	case "stats":
		return nonZero(h.l.Stats())
	case "problem":
		if p := h.l.Problem(time.Now(), time.Minute); p != "" {
			return p
		}
		return "none"
	case "closestore":
		if err := h.store.Close(); err != nil {
			t.Fatal(err)
		}
	case "failures":
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		var out []string
		for _, err := range h.p.failed {
			out = append(out, "store error: "+err.Error())
		}
		if out == nil {
			return "none"
		}
		return strings.Join(out, "\n")
	case "stop":
		h.l.StopReading()
	case "closeall":
		h.l.CloseAll()
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	return ""
}

// listen starts a Listener of cfg (a store of its own) delivering into
// a new recorder.
func (h *harness) listen(cfg Config) {
	dir, err := os.MkdirTemp(h.dir, "store")
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := localstream.Open(dir, localstream.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	cfg.Meta, cfg.Logger, cfg.Now = s, slog.New(slog.DiscardHandler), time.Now
	h.store, h.p, h.shown = s, &recorder{more: make(chan struct{}, 1)}, 0
	h.l = New(cfg, h.p)
	if err := h.l.Bind(); err != nil {
		h.t.Fatal(err)
	}
	h.l.Start()
}

// stopListener stops the listener (if running) and closes the clients.
func (h *harness) stopListener() {
	for name, c := range h.clients {
		c.conn.Close()
		delete(h.clients, name)
	}
	if h.l == nil {
		return
	}
	if !h.l.isStopping() {
		h.l.StopReading()
	}
	h.l.CloseAll()
	if err := h.store.Close(); err != nil { // a second Close returns the first's result
		h.t.Errorf("close the store: %v", err)
	}
	h.l = nil
}

// delivered waits for n more deliveries and prints them.
func (h *harness) delivered(n int) string {
	var b strings.Builder
	deadline := time.After(5 * time.Second)
	for i := h.shown + 1; i <= h.shown+n; i++ {
		for h.p.delivery(i) == nil {
			select {
			case <-h.p.more:
			case <-time.After(2 * time.Millisecond): // a signal taken by an earlier wait
			case <-deadline:
				fmt.Fprintf(&b, "only %d deliveries after 5s\n", i-1)
				h.shown = i - 1
				return b.String()
			}
		}
		b.WriteString(h.p.delivery(i).String(i) + "\n")
	}
	h.shown += n
	return b.String()
}

// recorder is the Pipeline: it records what the listener reserves and
// delivers, and leaves the acks to the script.
type recorder struct {
	mu         sync.Mutex
	deliveries []*delivery
	reserved   int
	failed     []error
	// more is signalled after each delivery (capacity 1).
	more chan struct{}
	// refuseReserve: Reserve answers false (a stopping pipeline).
	refuseReserve atomic.Bool
}

type delivery struct {
	m     *Message
	ack   func()
	dedup bool
}

func (d *delivery) String(i int) string {
	will := ""
	if d.m.c == nil {
		will = " will"
	}
	payload := strconv.Quote(string(d.m.Payload()))
	if len(d.m.Payload()) > 64 {
		payload = fmt.Sprintf("<%d bytes>", len(d.m.Payload()))
	}
	return fmt.Sprintf("#%d%s topic=%s qos=%d id=%d dup=%t retained=%t dedup=%t payload=%s",
		i, will, d.m.Topic(), d.m.Qos(), d.m.MessageID(), d.m.Duplicate(), d.m.Retained(), d.dedup, payload)
}

func (r *recorder) Reserve(m *Message) bool {
	if r.refuseReserve.Load() {
		return false
	}
	r.mu.Lock()
	r.reserved++
	r.mu.Unlock()
	return true
}

func (r *recorder) Deliver(m *Message, ack func(), d dedup.Source) {
	r.mu.Lock()
	r.deliveries = append(r.deliveries, &delivery{m: m, ack: ack, dedup: d != nil})
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
}

func (r *recorder) Fail(err error) {
	r.mu.Lock()
	r.failed = append(r.failed, err)
	r.mu.Unlock()
}

// delivery is the i-th delivery (from 1), nil if not yet made.
func (r *recorder) delivery(i int) *delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 1 || i > len(r.deliveries) {
		return nil
	}
	return r.deliveries[i-1]
}

// client is a script's raw MQTT client; a goroutine reads its packets.
type client struct {
	conn net.Conn
	in   chan any // packets.ControlPacket, then an error
	wmu  sync.Mutex
}

func newClient(nc net.Conn) *client {
	c := &client{conn: nc, in: make(chan any, 64)}
	go func() {
		r := bufio.NewReader(nc)
		for {
			p, err := packets.ReadPacket(r)
			if err != nil {
				c.in <- err
				return
			}
			c.in <- p
		}
	}()
	return c
}

func (c *client) send(p packets.ControlPacket) {
	var b bytes.Buffer
	p.Write(&b)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.Write(b.Bytes())
}

func (c *client) recv(d time.Duration) string {
	select {
	case x := <-c.in:
		return describe(c, x)
	case <-time.After(d):
		return fmt.Sprintf("nothing after %s", d)
	}
}

func (c *client) quiet(d time.Duration) string {
	select {
	case x := <-c.in:
		return describe(c, x)
	case <-time.After(d):
		return "quiet"
	}
}

// describe prints a packet the client got, or "closed" (the server ended
// the connection; the client closes its side, as a client does).
func describe(c *client, x any) string {
	switch p := x.(type) {
	case error:
		c.in <- p // closed stays closed
		c.conn.Close()
		var ne net.Error
		if errors.As(p, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "closed"
	case *packets.ConnackPacket:
		return fmt.Sprintf("CONNACK rc=%d session=%t", p.ReturnCode, p.SessionPresent)
	case *packets.PubackPacket:
		return fmt.Sprintf("PUBACK id=%d", p.MessageID)
	case *packets.PubrecPacket:
		return fmt.Sprintf("PUBREC id=%d", p.MessageID)
	case *packets.PubcompPacket:
		return fmt.Sprintf("PUBCOMP id=%d", p.MessageID)
	case *packets.SubackPacket:
		return fmt.Sprintf("SUBACK id=%d codes=%v", p.MessageID, p.ReturnCodes)
	case *packets.UnsubackPacket:
		return fmt.Sprintf("UNSUBACK id=%d", p.MessageID)
	case *packets.PingrespPacket:
		return "PINGRESP"
	default:
		return fmt.Sprintf("%T", p)
	}
}

// nonZero prints the non-zero counters of s (not the Connections gauge,
// which a closing connection moves a moment after its client saw it end).
func nonZero(s Stats) string {
	v := reflect.ValueOf(s)
	var out []string
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name == "Connections" {
			continue
		}
		if x := v.Field(i); !x.IsZero() {
			out = append(out, fmt.Sprintf("%s=%v", name, x.Interface()))
		}
	}
	return strings.Join(out, " ")
}
