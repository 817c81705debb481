// Package flyrig flies a test drone through a real agent into a real
// central server — MAVLink system 1 (the simulator, armed between two
// ground phases) and the replayed H.264 capture under one drone id — for
// the tests of flight records and of their commands.
package flyrig

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replay"
)

// The drone and agent of a test flight.
const (
	Drone = "mav-1"
	Agent = "gs-1"
	SSRC  = 0x5EED0001
)

// Sent is the MAVLink simulator's log of the frames it sent, in order.
type Sent struct {
	mu     sync.Mutex
	frames [][]byte
}

func (s *Sent) tap(_ uint8, f []byte) {
	s.mu.Lock()
	s.frames = append(s.frames, bytes.Clone(f))
	s.mu.Unlock()
}

// Frames returns the frames sent so far.
func (s *Sent) Frames() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frames
}

// Flown is what a flight left.
type Flown struct {
	Central *central.Server
	Sent    *Sent
	Video   replay.Summary
	// Stop stops the agent (its final commit); safe to call twice.
	Stop func()
}

// Options shape a test flight.
type Options struct {
	// Duration of the MAVLink drone's run and Ground, its disarmed time at
	// each end. Default 11 s and 2 s.
	Duration, Ground time.Duration
	// During, when set, runs while the drone flies (a link cut, say).
	During func(a *agent.Agent)
	// Link, when set, returns the address the agent dials instead of the
	// centre's (a proxy).
	Link func(centralAddr string) string
	// Config, when set, changes the agent's configuration.
	Config func(*agent.Config)
	// Landed, when set, is polled (every 250 ms, up to 30 s) after the
	// drone's run before the agent stops: the test's own sign that the
	// centre holds the whole flight. Nil: the agent keeps running until
	// Stop (or the test's end).
	Landed func() bool
}

// Fly runs a central server and an agent, and flies the drone.
func Fly(t testing.TB, o Options) *Flown {
	t.Helper()
	if o.Duration == 0 {
		o.Duration, o.Ground = 11*time.Second, 2*time.Second
	}
	csrv := rigs.StartCentral(t, central.Config{})
	url := csrv.ClientURL()
	if o.Link != nil {
		url = "nats://" + o.Link(url[len("nats://"):])
	}
	cfg := agent.NewDefaultConfig()
	cfg.AgentID = Agent
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
	cfg.Video.Drones = []video.DroneConfig{{ID: Drone, SSRC: SSRC}}
	cfg.MAVLink.Enabled = true
	cfg.MAVLink.UDPListen = "127.0.0.1:0"
	cfg.MAVLink.Drones = map[uint8]string{1: Drone}
	if o.Config != nil {
		o.Config(&cfg)
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
	var once sync.Once
	f := &Flown{Central: csrv, Sent: &Sent{}}
	f.Stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		})
	}
	t.Cleanup(f.Stop)
	var wg sync.WaitGroup
	var simErr, vidErr error
	wg.Go(func() {
		_, simErr = mavlink.Simulate(ctx, mavlink.SimConfig{To: "udp://" + a.MAVLinkUDPAddr().String(),
			Duration: o.Duration, GroundTime: o.Ground, Tap: f.Sent.tap})
	})
	wg.Go(func() {
		time.Sleep(o.Ground + 500*time.Millisecond) // the video plays while the drone flies
		f.Video, vidErr = replay.Send(ctx, Capture(), a.VideoAddr().String(),
			replay.Options{Speed: 1, SSRC: SSRC, Mux: true, Live: true})
	})
	if o.During != nil {
		o.During(a)
	}
	wg.Wait()
	if simErr != nil || vidErr != nil {
		t.Fatalf("simulator: %v, video: %v", simErr, vidErr)
	}
	if o.Landed != nil {
		testkit.UntilEvery(30*time.Second, 250*time.Millisecond, o.Landed)
		f.Stop()
	}
	return f
}

// Capture is the replayed H.264 capture (testdata/h264.pcap).
func Capture() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "h264.pcap")
}
