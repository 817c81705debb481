package replicate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// connect connects the way the agent does, only to urls.
func connect(t testing.TB, urls ...string) *nats.Conn {
	t.Helper()
	nc, err := Connect(ConnConfig{URLs: urls, IgnoreDiscoveredServers: true, RequestTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// Not connected within 10 s: the caller's first request says why.
	testkit.Until(10*time.Second, nc.IsConnected)
	return nc
}

func newInstance() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newSink(t testing.TB, nc *nats.Conn, agent string) *JetStreamSink {
	t.Helper()
	s, err := NewJetStreamSink(nc, agent, newInstance(), JetStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
