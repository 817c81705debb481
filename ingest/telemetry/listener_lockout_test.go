package telemetry

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// dialFrom opens a TCP connection to addr from the local IP src (any
// 127/8 address is this host's), so that a test can be another host.
func dialFrom(t testing.TB, src, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// TestListenerKeepAliveZeroHasDeadline (issue 30.2): a client that asks
// for keep-alive 0 (none) and falls silent is closed after MaxKeepAlive ×
// 1.5, as one that asked for MaxKeepAlive. On main keep-alive 0 removed
// every read deadline: 256 such connections held every slot for good.
func TestListenerKeepAliveZeroHasDeadline(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := listenConfig()
	cfg.MaxKeepAlive = 400 * time.Millisecond
	in, stop := startListener(t, cfg, s, st, nil)
	c := dialRaw(t, in.ListenAddr().String())
	if code := rawConnect(t, c, "idle", true, 0, nil); code != 0 {
		t.Fatalf("connack %d", code)
	}
	closedByServer(t, c, 5*time.Second)
	testkit.WaitFor(t, 5*time.Second, "the timeout counted", func() bool { return in.Stats().ListenerKeepAliveTimeouts == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestListenerIdleHostLocksNoOneOut (issue 30.2): another host opens more
// connections than MaxConnectionsPerSource, CONNECTed with keep-alive 0,
// and more sockets that never CONNECT: the ones over its share are closed
// at once, the oldest unconnected ones make room for newcomers, and a
// drone from another address connects and stores its telemetry. The
// lock-out attempt is counted and reported by Problems. On main the idle
// connections took every slot and the drone could not connect.
func TestListenerIdleHostLocksNoOneOut(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := listenConfig()
	cfg.MaxConnections = 16
	cfg.MaxConnectionsPerSource = 6
	cfg.MaxUnconnected = 4
	cfg.ConnectTimeout = 10 * time.Second
	logs := &testkit.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	in, stop := startListener(t, cfg, s, st, nil)
	addr := in.ListenAddr().String()
	const hostile = "127.0.0.2"
	// Sockets that never CONNECT, from several addresses of the host.
	for i := 0; i < 8; i++ {
		if _, err := dialFrom(t, fmt.Sprintf("127.0.0.%d", 3+i%4), addr); err != nil {
			t.Fatal(err)
		}
	}
	// Connections with keep-alive 0 from one address, beyond its share.
	connected := 0
	for i := 0; i < 2*cfg.MaxConnections; i++ {
		c, err := dialFrom(t, hostile, addr)
		if err != nil {
			continue
		}
		if rawConnectMaybe(c, fmt.Sprintf("idle-%d", i)) {
			connected++
		}
	}
	if connected > cfg.MaxConnectionsPerSource {
		t.Fatalf("%d idle connections from one address accepted, want at most %d", connected, cfg.MaxConnectionsPerSource)
	}
	good := newListenPub(t, addr, "good", false, "good")
	if err := good.publish(1, 10, nil); err != nil {
		t.Fatal(err)
	}
	got := in.Stats()
	if got.ListenerSourceRefused == 0 || got.ListenerUnconnectedEvicted == 0 {
		t.Fatalf("source refused %d, unconnected evicted %d: the bounds did not act", got.ListenerSourceRefused, got.ListenerUnconnectedEvicted)
	}
	if p := strings.Join(in.Problems(time.Now()), "; "); !strings.Contains(p, "max_connections_per_source") && !strings.Contains(p, "max_unconnected") {
		t.Fatalf("problems %q do not report the lock-out", p)
	}
	testkit.WaitFor(t, 15*time.Second, "the lock-out logged", func() bool {
		l := logs.String()
		return regexp.MustCompile(`listener_source_refused=[1-9]`).MatchString(l) &&
			regexp.MustCompile(`listener_unconnected_evicted=[1-9]`).MatchString(l)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if msg := verifyExactlyOnce(filterDrone(readAll(t, st), "good"), map[string]uint64{"good": 10}); msg != "" {
		t.Fatal(msg)
	}
}

// rawConnectMaybe sends a clean CONNECT with keep-alive 0 and reports
// whether it was accepted (false: refused or closed).
func rawConnectMaybe(c net.Conn, client string) bool {
	if _, err := c.Write(connectPacket(client)); err != nil {
		return false
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 4)
	n, err := c.Read(b)
	return err == nil && n == 4 && b[0] == 0x20 && b[3] == 0
}

// connectPacket encodes a clean-session CONNECT with keep-alive 0.
func connectPacket(client string) []byte {
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 4
	cp.ClientIdentifier, cp.CleanSession, cp.Keepalive = client, true, 0
	var b bytes.Buffer
	cp.Write(&b)
	return b.Bytes()
}
