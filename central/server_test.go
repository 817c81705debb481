package central

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{DataDir: "x", Listen: "nope"},
		{DataDir: "x", ClusterName: "c"},
		{DataDir: "x", ClusterName: "c", ClusterListen: "127.0.0.1:0", Routes: []string{"::bad"}},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

// TestRestartKeepsDataAndPort: a stream and its message survive a restart,
// which comes back on the same port.
func TestRestartKeepsDataAndPort(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	url := s.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.ClientURL() != url {
		t.Fatalf("restart moved the server from %s to %s", url, s.ClientURL())
	}
	nc, err = nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	st, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "t.a")
	if err != nil || string(m.Data) != "x" {
		t.Fatalf("after restart: %v %v", m, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

// TestLocalClusterR3 forms three nodes, creates an R3 stream and keeps
// accepting writes after its leader is shut down.
func TestLocalClusterR3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes, err := StartLocalCluster(ctx, t.TempDir(), "c", 3, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	urls := nodes[0].ClientURL() + "," + nodes[1].ClientURL() + "," + nodes[2].ClientURL()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Replicas: 3})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // retried until the cluster has a meta leader; testkit imports central
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "r.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	leader := -1
	for leader < 0 && ctx.Err() == nil {
		for i, n := range nodes {
			if n.IsStreamLeader("R") {
				leader = i
			}
		}
	}
	nodes[leader].Shutdown()
	for {
		pctx, pc := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.Publish(pctx, "r.a", []byte("2"))
		pc()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no write after leader %d shut down: %v", leader, err)
	}
	if err := nodes[leader].Start(); err != nil {
		t.Fatal(err)
	}
}

// TestBusyPortFailsFast: a taken client port is a clear error at once, not
// a wait for the ready timeout.
func TestBusyPortFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := New(Config{Listen: l.Addr().String(), DataDir: t.TempDir(), ReadyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	err = s.Start()
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "cannot listen") {
		t.Fatalf("Start on a busy port: %v", err)
	}
	if time.Since(start) > 30*time.Second { // the ready timeout is a minute
		t.Fatalf("took %v", time.Since(start))
	}
}
