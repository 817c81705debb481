package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/devices"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/replay"
)

// Options configure a demo run. The zero value gives the defaults noted.
type Options struct {
	// DataDir holds everything; default a temporary directory, removed at the end.
	DataDir string
	// Keep keeps a temporary DataDir.
	Keep bool
	// Drones is the number of simulated telemetry drones. Default 4.
	Drones int
	// VideoDrones is how many of them also send the test capture as video. Default 2.
	VideoDrones int
	// MAVLinkDrones is how many more drones fly as MAVLink autopilots
	// (mavlink.Simulate: 50 frames a second each over UDP to the agent's
	// MAVLink server), system ids 1.. as drones mav-1... Default 1;
	// negative: none.
	MAVLinkDrones int
	// Rate is each drone's telemetry rate in Hz. Default 20.
	Rate float64
	// Duration of the simulated flight. Default 10s.
	Duration time.Duration
	// Capture is the RTP capture replayed as video. Default testdata/h264.pcap
	// found from the working directory upwards.
	Capture string
	// Clip is where the exported clip of the first video drone is written.
	// Default <DataDir>/<drone>.h264, or <tmp>/edge-demo-<drone>.h264 when
	// DataDir is a temporary directory (removed at the end).
	Clip string
	// Progress receives the live progress lines and the report; nil = discard.
	Progress io.Writer
	// Logger receives the parts' logs. Default: warnings and errors to stderr.
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Drones <= 0 {
		o.Drones = 4
	}
	if o.VideoDrones < 0 || o.VideoDrones > o.Drones {
		return fmt.Errorf("demo: video drones %d must be within 0..%d drones", o.VideoDrones, o.Drones)
	}
	if o.VideoDrones == 0 {
		o.VideoDrones = min(2, o.Drones)
	}
	if o.MAVLinkDrones == 0 {
		o.MAVLinkDrones = 1
	}
	if o.MAVLinkDrones > 255 {
		return fmt.Errorf("demo: %d MAVLink drones: system ids are 1..255", o.MAVLinkDrones)
	}
	o.MAVLinkDrones = max(o.MAVLinkDrones, 0)
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Capture == "" {
		p, err := findUp(filepath.Join("testdata", "h264.pcap"))
		if err != nil {
			return fmt.Errorf("demo: the test capture testdata/h264.pcap was not found from the working directory; run from the repository or pass --pcap: %w", err)
		}
		o.Capture = p
	}
	return nil
}

// findUp looks for rel in the working directory and its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// droneName is the id of simulated drone i (1-based), the simulator's naming.
func droneName(i int) string { return fmt.Sprintf("drone-%d", i) }

// mavlinkName is the id of the MAVLink drone with system id sysid.
func mavlinkName(sysid uint8) string { return fmt.Sprintf("mav-%d", sysid) }

// Run runs the demo and returns its verification report. The error is
// non-nil when the run failed or the verification found a problem.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if o.DataDir == "" {
		dir, err := os.MkdirTemp("", "edge-demo-")
		if err != nil {
			return nil, err
		}
		o.DataDir = dir
		if !o.Keep {
			defer os.RemoveAll(dir)
			if o.Clip == "" { // keep the clip: it is the demo's output
				o.Clip = filepath.Join(os.TempDir(), "edge-demo-"+droneName(1)+".h264")
			}
		}
	}
	out := o.Progress
	fmt.Fprintf(out, "edge-agent demo: %d drones at %g Hz for %v, %d with video (%s), %d MAVLink drones at %d frames/s; data in %s\n",
		o.Drones, o.Rate, o.Duration, o.VideoDrones, filepath.Base(o.Capture), o.MAVLinkDrones, mavlink.SimFramesPerSecond, o.DataDir)

	// The central store, outside the agent so that it outlives it for the verification.
	csrv, err := central.New(central.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(o.DataDir, "central"),
		Logger: o.Logger.With("part", "central")})
	if err != nil {
		return nil, err
	}
	if err := csrv.Start(); err != nil {
		return nil, fmt.Errorf("demo: central: %w", err)
	}
	defer csrv.Close()
	brk, err := broker.Start(ctx, broker.Options{Dir: filepath.Join(o.DataDir, "mqtt"), Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("demo: mqtt broker: %w", err)
	}
	defer brk.Stop()
	kind := "mosquitto"
	if brk.Embedded() {
		kind = "embedded broker (mosquitto not installed)"
	}
	fmt.Fprintf(out, "central JetStream %s, MQTT %s (%s)\n", csrv.ClientURL(), brk.URL(), kind)

	cfg := agentConfig(o, csrv.ClientURL(), brk.URL())
	a, err := agent.New(cfg, o.Logger.With("part", "agent"))
	if err != nil {
		return nil, err
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(agentCtx) }()
	select {
	case <-a.Ready():
	case err := <-agentDone:
		return nil, fmt.Errorf("demo: agent did not start: %w", err)
	}
	fmt.Fprintf(out, "agent %s: RTP %s, MAVLink udp://%v, HTTP http://%s (/status, /metrics)\n", a.ID(), a.VideoAddr(), a.MAVLinkUDPAddr(), a.HTTPAddr())

	// Drones: telemetry simulators and replayed video, with live progress.
	var sim mqttsim.Result
	var simErr error
	videoSent := make([]replay.Summary, o.VideoDrones)
	videoErr := make([]error, o.VideoDrones)
	var wg sync.WaitGroup
	wg.Go(func() {
		sim, simErr = mqttsim.Simulate(ctx, mqttsim.Config{Broker: brk.URL(), Drones: o.Drones, Rate: o.Rate,
			Duration: o.Duration, ClientPrefix: "demo-sim"})
	})
	for i := range o.VideoDrones {
		wg.Go(func() {
			videoSent[i], videoErr[i] = replay.Send(ctx, o.Capture, a.VideoAddr().String(),
				replay.Options{Speed: 1, SSRC: videoSSRC(i), Mux: true, Live: true})
		})
	}
	mavSent := &mavlinkSent{}
	var mavErr error
	if o.MAVLinkDrones > 0 {
		wg.Go(func() {
			_, mavErr = mavlink.Simulate(ctx, mavlink.SimConfig{To: "udp://" + a.MAVLinkUDPAddr().String(),
				Drones: o.MAVLinkDrones, Duration: o.Duration, Tap: mavSent.tap})
		})
	}
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		showProgress(ctx, out, a, simDone(&wg))
	}()
	wg.Wait()
	<-progressDone
	if simErr != nil {
		return nil, fmt.Errorf("demo: simulator: %w", simErr)
	}
	if mavErr != nil {
		return nil, fmt.Errorf("demo: MAVLink simulator: %w", mavErr)
	}
	for i, err := range videoErr {
		if err != nil {
			return nil, fmt.Errorf("demo: video drone %s: %w", droneName(i+1), err)
		}
	}
	// Let the video sessions and drones go idle, then stop the agent: its
	// shutdown makes the final commit.
	time.Sleep(cfg.Video.SessionTimeout + 500*time.Millisecond)
	fmt.Fprintln(out, "drones landed; stopping the agent (final commit)")
	stopAgent()
	if err := <-agentDone; err != nil {
		return nil, fmt.Errorf("demo: agent: %w", err)
	}
	rep, err := verify(ctx, o, a.ID(), cfg.DataDir, csrv.ClientURL(), sim, videoSent, mavSent)
	if rep != nil {
		rep.Print(out)
	}
	if err != nil {
		return rep, err
	}
	if !rep.OK() {
		return rep, errors.New("demo: verification failed")
	}
	return rep, nil
}

// videoSSRC is the SSRC the capture is rewritten to for video drone i.
func videoSSRC(i int) uint32 { return 0x5EED0000 + uint32(i) + 1 }

// agentConfig is the agent's configuration for the demo.
func agentConfig(o Options, centralURL, brokerURL string) agent.Config {
	cfg := agent.NewDefaultConfig()
	cfg.AgentID = "demo"
	cfg.DataDir = filepath.Join(o.DataDir, "agent")
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Store.MinFreeBytes = 64 << 20
	cfg.Devices.HealthInterval = time.Second
	cfg.Devices.Disk.Interval = time.Second
	cfg.Devices.Disk.RetainBelow = devices.Threshold{Bytes: 256 << 20}
	cfg.Devices.Disk.ShedBelow = devices.Threshold{Bytes: 128 << 20}
	cfg.Watermark.IdleTimeout = 2 * time.Second
	cfg.Telemetry.Broker = brokerURL
	cfg.Central.URL = centralURL
	cfg.Central.ShutdownTimeout = 10 * time.Second
	cfg.Video.Listen = "127.0.0.1:0"
	cfg.Video.RTCPListen = "mux"
	cfg.Video.SessionTimeout = 2 * time.Second
	cfg.Video.Drones = nil
	for i := range o.VideoDrones {
		cfg.Video.Drones = append(cfg.Video.Drones, video.DroneConfig{ID: droneName(i + 1), SSRC: videoSSRC(i)})
	}
	if o.MAVLinkDrones > 0 {
		cfg.MAVLink.Enabled = true
		cfg.MAVLink.UDPListen = "127.0.0.1:0"
		cfg.MAVLink.Drones = map[uint8]string{}
		for i := range o.MAVLinkDrones {
			cfg.MAVLink.Drones[uint8(i+1)] = mavlinkName(uint8(i + 1))
		}
	}
	return cfg
}

// simDone returns a channel closed when wg is done.
func simDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}
