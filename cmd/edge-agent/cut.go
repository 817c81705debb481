package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/unpack"
)

func init() {
	commands["cut"] = command{
		summary: "the time cut at T across streams: is everything up to T at the centre, and where does a consumer start? (JSON)",
		run:     runCut,
	}
}

// cutOutput is what `edge-agent cut` prints: the time cut and, per
// stream, the sequences to start a consumer at (docs/unpack.md).
type cutOutput struct {
	centralread.TimeCut
	Starts []unpack.StreamStart `json:"starts"`
}

// runCut prints the time cut at --at (centralread.CutAt) as one JSON document.
// Exit status 0 when complete; 1 when not (or the wait timed out).
func runCut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cut", stderr)
	conn := addCentralFlags(fs)
	at := fs.String("at", "", "`TIME` T (RFC 3339 or Unix ns); required")
	agent := fs.String("agent", "", "only this agent `ID` (default: every agent at the centre)")
	var streams stringList
	fs.Var(&streams, "stream", "stream `NAME` to cover (repeatable; default video, telemetry, health)")
	wait := fs.Bool("wait", false, "wait until the cut is complete")
	timeout := fs.Duration("timeout", 0, "with --wait, give up after `D` (0: never)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	t, err := parseTimeFlag("at", *at)
	if err != nil {
		return err
	}
	if t == 0 {
		return usagef("--at TIME is required (RFC 3339 or Unix ns)")
	}
	for _, s := range streams {
		if err := localstream.ValidateStreamName(s); err != nil {
			return usagef("--stream: %v", err)
		}
	}
	nc, err := conn.connect("edge-agent-cut")
	if err != nil {
		return err
	}
	defer nc.Close()
	if *wait && *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	c, err := centralread.CutAt(ctx, nc, t, centralread.TimeCutOptions{Streams: streams, Agent: *agent, Wait: *wait})
	out := cutOutput{TimeCut: c}
	if err == nil {
		// Where a consumer starts, per stream, in EDGE_<STREAM> and in
		// the unpacker's EDGEEV_<STREAM>.
		out.Starts, err = unpack.Starts(ctx, nc, c)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if eerr := enc.Encode(out); eerr != nil {
		return eerr
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cut at %s: not complete after %s", time.Unix(0, t).UTC().Format(time.RFC3339Nano), *timeout)
	case err != nil && ctx.Err() == nil:
		return fmt.Errorf("cut at %s: %w", time.Unix(0, t).UTC().Format(time.RFC3339Nano), err)
	case !c.Complete && ctx.Err() == nil:
		return fmt.Errorf("cut at %s: not complete yet (see last_lower_ns; --wait waits)", time.Unix(0, t).UTC().Format(time.RFC3339Nano))
	}
	return nil
}
