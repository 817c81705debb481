package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
)

// runExportTelemetry: edge-agent export telemetry --format tlog --drone D
// [--from T1] [--to T2] -o FILE. It writes the drone's MAVLink frames at
// the centre, in order, as a tlog: each frame after its receive time —
// the time recorded by the tlog it was replayed from (mavlink-tlog-us),
// else when the agent received it.
func runExportTelemetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export telemetry", stderr)
	conn := addCentralFlags(fs)
	stream := fs.String("stream", "telemetry", "central telemetry stream `NAME`")
	agent := fs.String("agent", "", "only this agent `ID`")
	drone := fs.String("drone", "", "drone `ID` (required)")
	format := fs.String("format", "tlog", "output `FORMAT`: tlog (MAVLink frames; QGroundControl, MAVExplorer)")
	from := fs.String("from", "", "first receive `TIME` (RFC 3339 or Unix ns; default the beginning)")
	to := fs.String("to", "", "last receive `TIME` (default the end)")
	out := fs.String("o", "", "output `FILE` (e.g. flight.tlog)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "tlog" {
		return usagef("--format %q: only tlog (MAVLink telemetry) is supported", *format)
	}
	if *drone == "" || *out == "" {
		return usagef("--drone and -o are required")
	}
	t1, err := parseTimeFlag("from", *from)
	if err != nil {
		return err
	}
	t2, err := parseTimeFlag("to", *to)
	if err != nil {
		return err
	}
	if t2 == 0 {
		t2 = 1<<63 - 1
	}
	nc, err := conn.connect("edge-agent-export")
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := centralread.NewCentralReader(ctx, nc, *stream, centralread.ReadOptions{Agent: *agent, RoutingKey: *drone})
	if err != nil {
		return fmt.Errorf("export telemetry: %w", err)
	}
	f, err := createOut(*out)
	if err != nil {
		return err
	}
	defer f.abort() // a failed export, or one of no frame, leaves no file
	w := bufio.NewWriter(f)
	var buf []byte
	frames := 0
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("export telemetry: %w", err)
		}
		rec := it.Event.Record
		if it.Kind != centralread.ItemEvent || rec.RoutingKey != *drone || rec.ContentType != mavlink.ContentType {
			continue
		}
		at := rec.IngestTime
		if v, ok := rec.Header(mavlink.HeaderTlogTime); ok {
			if us, err := strconv.ParseInt(v, 10, 64); err == nil {
				at = us * 1000
			}
		}
		if at < t1 || at > t2 {
			continue
		}
		buf = mavlink.AppendTlogEntry(buf[:0], time.Unix(0, at), rec.Payload)
		w.Write(buf)
		frames++
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if frames == 0 {
		return fmt.Errorf("export telemetry: no MAVLink frame of drone %s at the centre in that time", *drone)
	}
	if err := f.commit(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d frames of drone %s\n", *out, frames, *drone)
	return nil
}
