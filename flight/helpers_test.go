package flight

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/internal/testkit/flyrig"
)

const (
	testDrone = flyrig.Drone
	testAgent = flyrig.Agent
)

// fly flies the test drone; the agent stops once the flight is complete
// at the centre, unless keepRunning.
func fly(t *testing.T, o flyrig.Options, keepRunning bool) *flyrig.Flown {
	t.Helper()
	var url string
	var nc *nats.Conn
	if !keepRunning {
		key := newKey(t)
		o.Landed = func() bool {
			if nc == nil {
				var err error
				if nc, err = nats.Connect(url); err != nil {
					return false
				}
				t.Cleanup(nc.Close)
			}
			return complete(nc, key)
		}
	}
	link := o.Link
	o.Link = func(addr string) string {
		url = "nats://" + addr
		if link != nil {
			return link(addr)
		}
		return addr
	}
	return flyrig.Fly(t, o)
}

// complete reports whether the drone's first flight is complete at the
// centre.
func complete(nc *nats.Conn, key ed25519.PrivateKey) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fl, err := Find(ctx, nc, FindOptions{Drone: testDrone})
	if err != nil || len(fl) == 0 {
		return false
	}
	res, err := Export(ctx, nc, fl[0], ExportOptions{FindOptions: FindOptions{Drone: testDrone}, Key: key}, io.Discard)
	return err == nil && res.Certificate.Status == StatusComplete
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
