package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/edge-agent/edge-agent/centralread"
)

func init() {
	commands["export"] = command{
		summary:     "export video|telemetry|flight: write a drone's video (playable file) or MAVLink telemetry (tlog) between two times, or one flight as a signed MCAP record, from the central store",
		run:         runExport,
		subcommands: []string{"video", "telemetry", "flight"},
	}
}

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "telemetry" {
		return runExportTelemetry(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "flight" {
		return runExportFlight(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && asksHelp(args[:1]) {
		commandUsage(newFlagSet("export", stderr), "export")
		return usageError{flag.ErrHelp}
	}
	if len(args) == 0 || args[0] != "video" {
		return usagef("usage: edge-agent export video|telemetry|flight --drone D (--from T1 --to T2 | --flight N) -o FILE")
	}
	fs := newFlagSet("export video", stderr)
	conn := addCentralFlags(fs)
	stream := fs.String("stream", "video", "central video stream `NAME`")
	agent := fs.String("agent", "", "only this agent `ID` (required when several agents captured the drone)")
	drone := fs.String("drone", "", "drone `ID` (required)")
	from := fs.String("from", "", "start `TIME` (RFC 3339 or Unix ns); the export starts at the keyframe at or before it")
	to := fs.String("to", "", "end `TIME`")
	out := fs.String("o", "", "output `FILE` (Annex-B elementary stream, e.g. out.h264)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *drone == "" || *out == "" || *from == "" || *to == "" {
		return usagef("--drone, --from, --to and -o are required")
	}
	t1, err := parseTimeFlag("from", *from)
	if err != nil {
		return err
	}
	t2, err := parseTimeFlag("to", *to)
	if err != nil {
		return err
	}
	if t2 < t1 {
		return usagef("--to is before --from")
	}
	nc, err := conn.connect("edge-agent-export")
	if err != nil {
		return err
	}
	defer nc.Close()
	f, err := createOut(*out)
	if err != nil {
		return err
	}
	defer f.abort() // a partial or merged clip, or none, is no export
	st, err := centralread.ExportVideo(ctx, nc, centralread.ExportOptions{Stream: *stream, Agent: *agent, Drone: *drone, FromNs: t1, ToNs: t2}, f)
	if err != nil {
		return fmt.Errorf("export video: %w", err)
	}
	if st.Chunks == 0 {
		return fmt.Errorf("export video: no chunk of drone %s between %s and %s (is there a keyframe?)", *drone, *from, *to)
	}
	if err := f.commit(); err != nil {
		return fmt.Errorf("export video: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s: %d chunks, %d bytes, from keyframe at %d ns to %d ns\n", *out, st.Chunks, st.Bytes, st.StartedAtKeyNs, st.LastNs)
	return nil
}
