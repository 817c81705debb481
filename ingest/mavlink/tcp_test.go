package mavlink

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestIdleConnectionsDoNotLockOutTCP (issue 37, case 7): a host opens
// max_connections TCP connections to tcp_listen and sends nothing on
// them. A drone's TCP link, redialled as a real link is after a refusal,
// must still get in and be stored: the idle connections are evicted for
// it (or cut by their read deadline), counted. On main the idle ones held
// every slot for good: every dial of the drone was refused, 0 stored.
func TestIdleConnectionsDoNotLockOutTCP(t *testing.T) {
	_, st := openStore(t, t.TempDir())
	cfg := localConfig()
	cfg.Drones = map[uint8]string{1: "good-1"}
	in, _ := runIntake(t, cfg, st, nil)
	for range cfg.MaxConnections {
		c, err := net.Dial("tcp", in.TCPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	testkit.WaitFor(t, 10*time.Second, "the idle connections hold every slot", func() bool {
		return in.Stats().Connections == uint64(cfg.MaxConnections)
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	var mu sync.Mutex
	dials := 0
	wg.Go(func() { // the drone: it redials after every refusal, 100 ms apart
		w := newWriter(t, false, 1, 1, nil)
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			c, err := net.Dial("tcp", in.TCPAddr().String())
			if err != nil {
				continue
			}
			mu.Lock()
			dials++
			mu.Unlock()
			for ; ; i++ {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write(w.frame(t, sampleMessages(i)[i%3])); err != nil {
					break
				}
				select {
				case <-stop:
					c.Close()
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			c.Close()
		}
	})
	if !testkit.Until(20*time.Second, func() bool {
		d, _ := in.Stats().Drone(1)
		return d.Stored >= 20
	}) {
		d, _ := in.Stats().Drone(1)
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the drone's TCP link is locked out: %d dials, %d refused, %d stored", dials, in.Stats().ConnectionsRefused, d.Stored)
	}
	s := in.Stats()
	if s.ConnectionsEvicted+s.ConnectionsTimedOut == 0 {
		t.Fatalf("the drone got in without an idle connection evicted or timed out: %+v", s)
	}
	t.Logf("evicted %d, timed out %d, refused %d", s.ConnectionsEvicted, s.ConnectionsTimedOut, s.ConnectionsRefused)
}
