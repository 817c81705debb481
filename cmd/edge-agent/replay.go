package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/replay"
)

func init() {
	commands["replay"] = command{
		summary: "send a recorded RTP/RTCP capture (pcap/pcapng), JSONL telemetry recording or MAVLink tlog to an agent",
		run:     runReplay,
	}
}

// runReplay: edge-agent replay [--pcap FILE --to HOST:PORT] [--jsonl FILE
// --mqtt-broker URL] [--speed max|1.0] [--ssrc N] [--mux] [--from IP:PORT]
// [--quiet]. Both recordings given: sent together, each with its own timing.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", stderr)
	pcap := fs.String("pcap", "", "RTP/RTCP capture file, pcap or pcapng")
	jsonl := fs.String("jsonl", "", "telemetry recording, JSONL (see replay.TelemetryRecord), published to --mqtt-broker")
	broker := fs.String("mqtt-broker", "tcp://127.0.0.1:1883", "MQTT broker the agent subscribes to (with --jsonl)")
	to := fs.String("to", "127.0.0.1:5004", "agent RTP address HOST:PORT; RTCP goes to PORT+1 when the capture had it on a separate port")
	speed := fs.String("speed", "1.0", `timing: "max" (as fast as possible) or a factor of the original timing (1.0 = original)`)
	ssrc := fs.String("ssrc", "", "rewrite every SSRC to this value (decimal or 0x hex), to act as another drone")
	mux := fs.Bool("mux", false, "send RTCP to the RTP port (RFC 5761)")
	from := fs.String("from", "", "local source address IP[:PORT] (default any)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	live := fs.Bool("live", false, "shift the sender reports' clock to now: act as a live drone (with --speed 1)")
	tlogFile := fs.String("tlog", "", "MAVLink telemetry log (QGroundControl/MAVProxy .tlog), sent to --to udp://, tcp:// or tlog://HOST:PORT")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tlogFile != "" {
		if *pcap != "" || *jsonl != "" {
			return usagef("--tlog replays alone: give it without --pcap and --jsonl")
		}
		target := *to
		if !flagSet(fs, "to") {
			target = "udp://127.0.0.1:14550" // where a GCS (and mavlink.udp_listen) listens
		}
		return replayTlog(ctx, *tlogFile, target, *speed, *quiet, stdout, stderr)
	}
	if *pcap == "" && *jsonl == "" {
		return usagef("give --pcap FILE (RTP video), --jsonl FILE (MQTT telemetry) or --tlog FILE (MAVLink)")
	}
	opts := replay.Options{Mux: *mux, LocalAddr: *from, Live: *live}
	if *speed != "max" {
		f, err := strconv.ParseFloat(*speed, 64)
		if err != nil || f <= 0 {
			return usagef("--speed %q: want \"max\" or a positive factor such as 1.0", *speed)
		}
		opts.Speed = f
	}
	if *ssrc != "" {
		v, err := strconv.ParseUint(strings.TrimSpace(*ssrc), 0, 32)
		if err != nil || v == 0 {
			return usagef("--ssrc %q: want a non-zero 32-bit number (decimal or 0x hex)", *ssrc)
		}
		opts.SSRC = uint32(v)
	}
	if opts.LocalAddr != "" && !strings.Contains(opts.LocalAddr, ":") {
		opts.LocalAddr += ":0"
	}
	if !*quiet {
		opts.Progress = stderr
	}
	var jsonlErr error
	jsonlDone := make(chan struct{})
	go func() {
		defer close(jsonlDone)
		if *jsonl == "" {
			return
		}
		topts := replay.TelemetryOptions{Speed: opts.Speed}
		if *pcap == "" && !*quiet {
			topts.Progress = stderr
		}
		sum, skipped, err := replay.SendTelemetryFile(ctx, *jsonl, *broker, topts)
		if sum.Published > 0 || err == nil {
			fmt.Fprintf(stdout, "replay %s -> %s: %s; %d invalid lines skipped\n", *jsonl, *broker, sum, skipped)
		}
		jsonlErr = err
	}()
	defer func() { <-jsonlDone }()
	if *pcap == "" {
		<-jsonlDone
		if errors.Is(jsonlErr, replay.ErrTarget) || errors.Is(jsonlErr, replay.ErrFormat) {
			return usagef("%v", jsonlErr)
		}
		return jsonlErr
	}
	sum, err := replay.Send(ctx, *pcap, *to, opts)
	<-jsonlDone
	if err == nil && jsonlErr != nil {
		return jsonlErr
	}
	if errors.Is(err, replay.ErrTarget) || errors.Is(err, replay.ErrFormat) || errors.Is(err, replay.ErrNoRTP) {
		return usagef("%v", err)
	}
	if sum.Packets > 0 || err == nil {
		fmt.Fprintf(stdout, "replay %s -> %s: %s\n", *pcap, *to, sum)
	}
	return err
}

// replayTlog sends a tlog's frames to to (udp://, tcp:// or tlog://HOST:PORT).
func replayTlog(ctx context.Context, path, to, speed string, quiet bool, stdout, stderr io.Writer) error {
	var opts replay.TlogOptions
	if speed != "max" {
		f, err := strconv.ParseFloat(speed, 64)
		if err != nil || f <= 0 {
			return usagef("--speed %q: want \"max\" or a positive factor such as 1.0", speed)
		}
		opts.Speed = f
	}
	if !strings.Contains(to, "://") {
		to = "udp://" + to // a MAVLink UDP server, as a GCS listens
	}
	if !quiet {
		opts.Progress = stderr
	}
	sum, err := replay.SendTlog(ctx, path, to, opts)
	if errors.Is(err, replay.ErrTarget) || errors.Is(err, mavlink.ErrTlog) {
		return usagef("%v", err)
	}
	if sum.Frames > 0 || err == nil {
		fmt.Fprintf(stdout, "replay %s -> %s: %s\n", path, to, sum)
	}
	return err
}

// flagSet reports whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
