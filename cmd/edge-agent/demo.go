package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/edge-agent/edge-agent/demo"
)

func init() {
	commands["demo"] = command{
		summary: "everything in one process: central, broker, agent, simulated drones, replayed video; ends with a verification",
		run:     runDemo,
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	var o demo.Options
	fs.StringVar(&o.DataDir, "data-dir", "", "keep everything here (default: a temporary directory, removed at the end)")
	fs.IntVar(&o.Drones, "drones", 4, "simulated telemetry drones")
	fs.IntVar(&o.VideoDrones, "video-drones", 2, "drones that also send the test capture as RTP video")
	fs.IntVar(&o.MAVLinkDrones, "mavlink-drones", 1, "more drones flying as MAVLink autopilots (50 frames/s over UDP; -1: none)")
	fs.Float64Var(&o.Rate, "rate", 20, "telemetry messages per second per drone")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "how long the drones fly")
	fs.StringVar(&o.Capture, "pcap", "", "RTP capture replayed as video (default testdata/h264.pcap)")
	fs.StringVar(&o.Clip, "clip", "", "where to write the exported clip (default <data-dir>/drone-1.h264, or $TMPDIR/edge-demo-drone-1.h264)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.Drones < 1 || o.VideoDrones < 0 || o.VideoDrones > o.Drones || o.Rate <= 0 || o.Duration <= 0 {
		return usagef("need --drones ≥ 1, 0 ≤ --video-drones ≤ --drones, --rate > 0, --duration > 0")
	}
	o.Keep = o.DataDir != ""
	o.Progress = stdout
	_, err := demo.Run(ctx, o)
	if err != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
