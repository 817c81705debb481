package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/flight"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/devices"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/flyrig"
)

// TestFlightAcrossOutage: the uplink is cut while the drone flies and
// stays cut past its landing, and the disk runs short meanwhile so the
// agent sheds unreplicated video (gap markers). At the centre the flight
// is pending — open or below the watermark — until the backlog drains;
// then it is complete, holding every MAVLink frame the drone sent during
// it, once and in order, and the shed video as gap markers. Hiding one
// of those markers fails verify, naming it.
func TestFlightAcrossOutage(t *testing.T) {
	var proxy *testkit.Proxy
	var short atomic.Bool
	f := fly(t, flyrig.Options{
		Link: func(addr string) string {
			proxy = testkit.NewProxy(t, addr, testkit.ProxyHooks{})
			return proxy.Addr()
		},
		Config: func(c *agent.Config) {
			c.Devices.Disk.Interval = 200 * time.Millisecond
			c.Devices.Disk.Policy = []devices.ShedRule{{Stream: "video", AllowUnreplicated: true}}
			c.Devices.Disk.RetainBelow = devices.Threshold{Percent: 20}
			c.Devices.Disk.ShedBelow = devices.Threshold{Percent: 10}
			c.Devices.Disk.DiskSpace = func(string) (int64, int64, error) {
				if short.Load() {
					return 5 << 30, 100 << 30, nil // 5 % free: shed
				}
				return 90 << 30, 100 << 30, nil
			}
		},
		During: func(a *agent.Agent) {
			time.Sleep(4500 * time.Millisecond) // armed at 2 s: the centre has seen the take-off
			proxy.SetDown(true)
			time.Sleep(2 * time.Second)
			short.Store(true)
			time.Sleep(1500 * time.Millisecond)
			short.Store(false)
		},
	}, true)
	if proxy.Cuts()+proxy.Refused() == 0 {
		t.Fatal("the link was never cut")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nc := connect(t, f.Central.ClientURL())
	key := newKey(t)
	// The drone has landed; the centre does not know it yet.
	fl, err := flight.Find(ctx, nc, flight.FindOptions{Drone: testDrone})
	if err != nil || len(fl) != 1 {
		t.Fatalf("flights during the outage: %+v, %v", fl, err)
	}
	res, err := flight.Export(ctx, nc, fl[0], flight.ExportOptions{FindOptions: flight.FindOptions{Drone: testDrone}, Key: key}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Certificate.Status != flight.StatusIncomplete || !fl[0].Open {
		t.Fatalf("during the outage the flight is %s (open %v), want pending", res.Certificate.Status, fl[0].Open)
	}
	t.Logf("during the outage: %v", res.Certificate.Reasons)
	if c := checksAreCertificates(t, nc, key, fl[0]); c[0].Status != flight.StatusIncomplete {
		t.Fatalf("during the outage one pass says %s", c[0].Status)
	}

	proxy.SetDown(false)
	if !testkit.UntilEvery(60*time.Second, 250*time.Millisecond, func() bool { return complete(nc, key) }) {
		t.Fatal("the flight is not complete 60 s after the link came back")
	}
	f.Stop()
	fl, err = flight.Find(ctx, nc, flight.FindOptions{Drone: testDrone})
	if err != nil || len(fl) != 1 || fl[0].Open {
		t.Fatalf("flights after the drain: %+v, %v", fl, err)
	}
	if c := checksAreCertificates(t, nc, key, fl[0]); c[0].Status != flight.StatusComplete {
		t.Fatalf("after the drain one pass says %s %v", c[0].Status, c[0].Reasons)
	}
	path := filepath.Join(t.TempDir(), "flight.mcap")
	out, _ := os.Create(path)
	res, err = flight.Export(ctx, nc, fl[0], flight.ExportOptions{FindOptions: flight.FindOptions{Drone: testDrone}, Key: key}, out)
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	cert := res.Certificate
	if cert.Status != flight.StatusComplete {
		t.Fatalf("after the drain: %s %v", cert.Status, cert.Reasons)
	}
	// Every frame the drone sent between its HEARTBEATs of the flight's
	// window, once, in order.
	mav := readTopic(t, path, "/mavlink/"+testDrone)
	first, last := indexOf(f.Sent.Frames(), mav[0].Data), indexOf(f.Sent.Frames(), mav[len(mav)-1].Data)
	if first < 0 || last-first+1 != len(mav) {
		t.Fatalf("the record holds %d frames, the sender sent %d from its first to its last (%d..%d)", len(mav), last-first+1, first, last)
	}
	for i, m := range mav {
		if !bytes.Equal(m.Data, f.Sent.Frames()[first+i]) {
			t.Fatalf("frame %d differs from the sender's %d", i, first+i)
		}
	}
	if span := time.Duration(fl[0].EndNs - fl[0].StartNs); span < 6*time.Second {
		t.Fatalf("flight spans %v", span)
	}
	var markers int
	for _, g := range cert.Gaps {
		if g.Stream == "video" {
			markers++
		}
	}
	if markers == 0 {
		t.Fatalf("no shed video marker in the certificate (gaps %+v): the disk-pressure fault did not happen", cert.Gaps)
	}
	t.Logf("complete after the drain: %d events, %d MAVLink frames, %d gap markers", cert.Events, len(mav), len(cert.Gaps))

	pub := key.Public().(ed25519.PublicKey)
	if err := verifyFile(t, path, flight.VerifyOptions{Trusted: []ed25519.PublicKey{pub}}).Err(); err != nil {
		t.Fatalf("verify: %v", err)
	}
	hidden := rewrite(t, path, dropNth(flight.TopicGaps, 1))
	err = verifyFile(t, hidden, flight.VerifyOptions{Trusted: []ed25519.PublicKey{pub}}).Err()
	if err == nil || !strings.Contains(err.Error(), "gap marker") {
		t.Fatalf("verify with a gap marker hidden = %v, want it named", err)
	}
}

func indexOf(frames [][]byte, f []byte) int {
	for i, x := range frames {
		if bytes.Equal(x, f) {
			return i
		}
	}
	return -1
}
