package flight

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replay"
)

// testDrone is the drone of the flight tests: MAVLink system 1 and the
// replayed H.264 capture, both under one id.
const (
	testDrone = "mav-1"
	testAgent = "gs-1"
	testSSRC  = 0x5EED0001
)

// sentFrames is the MAVLink simulator's log of what it sent.
type sentFrames struct {
	mu     sync.Mutex
	frames [][]byte
}

func (s *sentFrames) tap(_ uint8, f []byte) {
	s.mu.Lock()
	s.frames = append(s.frames, bytes.Clone(f))
	s.mu.Unlock()
}

// flown is what fly left at the centre.
type flown struct {
	central *central.Server
	sent    *sentFrames
	video   replay.Summary
}

// flyOptions shape a test flight.
type flyOptions struct {
	// duration of the MAVLink drone's run; ground: disarmed time at each end.
	duration, ground time.Duration
	// during, when set, runs while the drone flies (a link cut, say).
	during func(a *agent.Agent)
	// link, when set, is put between the agent and the centre.
	link func(centralAddr string) string
	// keepRunning leaves the agent running (returned stop ends it).
	keepRunning bool
	// config, when set, changes the agent's configuration.
	config func(*agent.Config)
}

// fly runs a central server and an agent, flies the MAVLink drone with
// the replayed video under the same id, and stops the agent (its final
// commit), unless keepRunning.
func fly(t *testing.T, o flyOptions) (*flown, func()) {
	t.Helper()
	if o.duration == 0 {
		o.duration, o.ground = 11*time.Second, 2*time.Second
	}
	csrv := rigs.StartCentral(t, central.Config{})
	url := csrv.ClientURL()
	if o.link != nil {
		url = "nats://" + o.link(csrv.ClientURL()[len("nats://"):])
	}
	cfg := agent.NewDefaultConfig()
	cfg.AgentID = testAgent
	cfg.DataDir = filepath.Join(t.TempDir(), "agent")
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Store.MinFreeBytes = 16 << 20
	cfg.Devices.HealthInterval = time.Second
	cfg.Watermark.IdleTimeout = 2 * time.Second
	// A stream whose drones have all gone (the video after its session
	// ends) follows the receiving clock at now − MaxClockSkew: 1 s here,
	// so the flight's end is passed soon after landing.
	cfg.Watermark.MaxClockSkew = time.Second
	cfg.Telemetry.Enabled = false
	cfg.Central.URL = url
	cfg.Central.ShutdownTimeout = 10 * time.Second
	cfg.Video.Listen = "127.0.0.1:0"
	cfg.Video.RTCPListen = "mux"
	cfg.Video.SessionTimeout = 2 * time.Second
	cfg.Video.Drones = []video.DroneConfig{{ID: testDrone, SSRC: testSSRC}}
	cfg.MAVLink.Enabled = true
	cfg.MAVLink.UDPListen = "127.0.0.1:0"
	cfg.MAVLink.Drones = map[uint8]string{1: testDrone}
	if o.config != nil {
		o.config(&cfg)
	}
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("agent did not start: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
	t.Cleanup(stop)
	f := &flown{central: csrv, sent: &sentFrames{}}
	var wg sync.WaitGroup
	var simErr, vidErr error
	wg.Go(func() {
		_, simErr = mavlink.Simulate(ctx, mavlink.SimConfig{To: "udp://" + a.MAVLinkUDPAddr().String(),
			Duration: o.duration, GroundTime: o.ground, Tap: f.sent.tap})
	})
	wg.Go(func() {
		time.Sleep(o.ground + 500*time.Millisecond) // the video plays while the drone flies
		f.video, vidErr = replay.Send(ctx, filepath.Join("..", "testdata", "h264.pcap"), a.VideoAddr().String(),
			replay.Options{Speed: 1, SSRC: testSSRC, Mux: true, Live: true})
	})
	if o.during != nil {
		o.during(a)
	}
	wg.Wait()
	if simErr != nil || vidErr != nil {
		t.Fatalf("simulator: %v, video: %v", simErr, vidErr)
	}
	if !o.keepRunning {
		// The video session ends and every stream's committed watermark
		// passes the landing; then the final commit.
		waitComplete(t, csrv.ClientURL(), 30*time.Second)
		stop()
	}
	return f, stop
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

// waitComplete waits until the drone's first flight is complete at the
// centre (or d passes: the test then sees why not).
func waitComplete(t *testing.T, url string, d time.Duration) {
	t.Helper()
	nc := connect(t, url)
	key := newKey(t)
	testkit.Until(d, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fl, err := Find(ctx, nc, FindOptions{Drone: testDrone})
		if err != nil || len(fl) == 0 {
			return false
		}
		res, err := Export(ctx, nc, fl[0], ExportOptions{FindOptions: FindOptions{Drone: testDrone}, Key: key}, io.Discard)
		return err == nil && res.Certificate.Status == StatusComplete
	})
}
