package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/replay"
)

func init() {
	commands["simulate"] = command{
		summary: "publish simulated drone telemetry to an MQTT broker, or MAVLink (--mavlink) to an agent",
		run:     runSimulate,
	}
}

// runSimulate publishes telemetry for N drones and prints what was published.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", stderr)
	var cfg mqttsim.Config
	fs.StringVar(&cfg.Broker, "mqtt-broker", "tcp://127.0.0.1:1883", "MQTT broker URL")
	fs.IntVar(&cfg.Drones, "drones", 3, "number of drones")
	fs.Float64Var(&cfg.Rate, "rate", 10, "messages per second per drone (0 = as fast as the broker acks)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to publish (0 = until --count)")
	fs.IntVar(&cfg.Count, "count", 0, "messages per drone (0 = until --duration)")
	qos := fs.Uint("qos", 1, "MQTT QoS of the messages (0, 1, 2)")
	fs.StringVar(&cfg.TopicPrefix, "topic-prefix", "drones", "topics are <prefix>/<drone>/telemetry and <prefix>/<drone>/status")
	fs.StringVar(&cfg.DronePrefix, "drone-prefix", "drone-", "drone names are <prefix>1..<prefix>N")
	fs.IntVar(&cfg.Window, "window", 1, "publishes in flight per drone (1 keeps strict order across reconnects)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the flight paths")
	fs.BoolVar(&cfg.NoStatus, "no-status", false, "do not publish online/offline status (nor the last will)")
	verbose := fs.Bool("verbose", false, "print every published message as '<topic> <payload>'")
	record := fs.String("record", "", "also write every published message to this JSONL file (replayable with 'edge-agent replay --jsonl')")
	mav := fs.Bool("mavlink", false, "send MAVLink instead (HEARTBEAT, SYS_STATUS, SYSTEM_TIME, GLOBAL_POSITION_INT, ATTITUDE, VFR_HUD: 50 frames/s a drone) to --to")
	mavTo := fs.String("to", "udp://127.0.0.1:14550", "with --mavlink: the agent's udp://HOST:PORT or tcp://HOST:PORT")
	mavV1 := fs.Bool("v1", false, "with --mavlink: MAVLink 1 frames")
	mavKey := fs.String("signing-key-file", "", "with --mavlink: sign MAVLink 2 frames with this key (64 hex digits or a passphrase)")
	mavSys := fs.Uint("first-sysid", 1, "with --mavlink: the first drone's system id")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *mav {
		sc := mavlink.SimConfig{To: *mavTo, Drones: cfg.Drones, Duration: cfg.Duration, V1: *mavV1, FirstSysID: uint8(min(*mavSys, 255))}
		if *mavKey != "" {
			key, err := mavlink.ReadSigningKey(*mavKey)
			if err != nil {
				return usagef("--signing-key-file: %v", err)
			}
			sc.SigningKey = key[:]
		}
		fmt.Fprintf(stdout, "simulate: %d MAVLink drone(s) (system ids %d..) -> %s, %d frames/s each\n", sc.Drones, sc.FirstSysID, sc.To, mavlink.SimFramesPerSecond)
		res, err := mavlink.Simulate(ctx, sc)
		if errors.Is(err, mavlink.ErrConfig) {
			return usagef("%v", err)
		}
		fmt.Fprintf(stdout, "simulate: sent %d frames in %s\n", res.Frames, res.Elapsed.Round(time.Millisecond))
		return err
	}
	if *qos > 2 {
		return usagef("--qos %d: want 0, 1 or 2", *qos)
	}
	q := byte(*qos)
	cfg.QoS = &q
	if cfg.Drones < 1 {
		return usagef("--drones %d: want at least 1", cfg.Drones)
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	if *verbose {
		var mu sync.Mutex
		cfg.OnPublished = func(_, topic string, _ uint64, payload []byte) {
			mu.Lock()
			fmt.Fprintf(stdout, "%s %s\n", topic, payload)
			mu.Unlock()
		}
	}
	if *record != "" {
		f, err := os.Create(*record)
		if err != nil {
			return err
		}
		defer f.Close()
		enc := json.NewEncoder(f)
		var mu sync.Mutex
		printer := cfg.OnPublished
		cfg.OnPublished = func(drone, topic string, seq uint64, payload []byte) {
			mu.Lock()
			enc.Encode(replay.NewTelemetryRecord(time.Now(), topic, q, payload))
			mu.Unlock()
			if printer != nil {
				printer(drone, topic, seq, payload)
			}
		}
	}
	fmt.Fprintf(stdout, "simulate: %d drone(s) -> %s, %.1f Hz, qos %d\n", cfg.Drones, cfg.Broker, cfg.Rate, q)
	res, err := mqttsim.Simulate(ctx, cfg)
	names := make([]string, 0, len(res.Drones))
	for n := range res.Drones {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := res.Drones[n]
		fmt.Fprintf(stdout, "  %-12s %-32s published %6d  seq %d..%d  retries %d\n", n, d.Topic, d.Published, d.FirstSeq, d.LastSeq, d.Retries)
	}
	rate := 0.0
	if res.Elapsed > 0 {
		rate = float64(res.Published) / res.Elapsed.Seconds()
	}
	fmt.Fprintf(stdout, "simulate: published %d messages in %s (%.0f msg/s)\n", res.Published, res.Elapsed.Round(time.Millisecond), rate)
	return err
}
