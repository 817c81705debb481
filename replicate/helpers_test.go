package replicate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
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

// seedFor returns the test's random seed (EDGE_SEED overrides) and logs it.
func seedFor(t testing.TB) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EDGE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed=%d (EDGE_SEED to replay)", seed)
	return seed
}

// rounds returns EDGE_ROUNDS or def.
func rounds(def int) int {
	if s := os.Getenv("EDGE_ROUNDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return def
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
