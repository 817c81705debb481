package centralread

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
)

// The reader's tests write the centre with the real replicator; these
// are the few rig pieces they need of the replicator's own tests.

// connect connects the way the agent does, only to urls.
func connect(t testing.TB, urls ...string) *nats.Conn {
	t.Helper()
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: urls, IgnoreDiscoveredServers: true, RequestTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	testkit.WaitFor(t, 10*time.Second, "connected", nc.IsConnected)
	return nc
}

func newInstance() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// replica is a replicator running for one stream.
type replica struct {
	r    *replicate.Replicator
	done chan error
	stop context.CancelFunc
}

func startReplica(t testing.TB, nc *nats.Conn, st *localstream.Stream, agent string, cfg replicate.ReplicatorConfig, jsOpts replicate.JetStreamOptions) *replica {
	t.Helper()
	inst := newInstance()
	sink, err := replicate.NewJetStreamSink(nc, agent, inst, jsOpts)
	if err != nil {
		t.Fatal(err)
	}
	r := replicate.NewReplicator(st, sink, inst, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	rp := &replica{r: r, done: make(chan error, 1), stop: cancel}
	go func() { rp.done <- r.Run(ctx) }()
	t.Cleanup(func() { sink.Close() }) // after the replicator stopped
	t.Cleanup(func() { rp.close() })
	return rp
}

func (rp *replica) close() error {
	rp.stop()
	select {
	case err := <-rp.done:
		rp.done <- err
		return err
	case <-time.After(10 * time.Second):
		return errors.New("replicator did not stop")
	}
}
