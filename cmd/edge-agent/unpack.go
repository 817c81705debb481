package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/unpack"
)

// runCentralUnpack is `edge-agent central unpack`: the unpack service
// against a running centre (docs/unpack.md).
func runCentralUnpack(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("central unpack", stderr)
	url := fs.String("central", "nats://127.0.0.1:4222", "central `URLS` (comma-separated)")
	var streams stringList
	fs.Var(&streams, "stream", "stream `NAME` to unpack (repeatable; default: every EDGE_<STREAM> at the centre, looked for every 10 s)")
	replicas := fs.Int("replicas", 0, "replicas of a derived stream it creates (0: as its source stream)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts := unpack.DefaultOptions()
	opts.Replicas = *replicas
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, s := range streams {
		if err := localstream.ValidateStreamName(s); err != nil {
			return usagef("--stream: %v", err)
		}
	}
	if *replicas < 0 || *replicas > 5 {
		return usagef("--replicas %d: want 0 (as the source) or 1..5", *replicas)
	}
	if *url == "" {
		return usagef("--central URL is required (nats://host:port)")
	}
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: strings.Split(*url, ","), Name: "edge-agent-unpack"}, nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := unpack.NewService(nc, streams, opts)
	if err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(stdout, "central unpack: %s → EDGEEV_<STREAM> (edgeev.<stream>.<agent>.<drone>)\n", nc.ConnectedUrlRedacted())
	return svc.Run(ctx)
}

// runUnpackBeside runs the unpack service inside `edge-agent central
// --unpack`, on an in-process connection to the node (no TCP loopback:
// less CPU per event, see docs/unpack.md).
func runUnpackBeside(ctx context.Context, node nats.InProcessConnProvider, stderr io.Writer) error {
	nc, err := nats.Connect("", nats.InProcessServer(node), nats.Name("edge-agent-unpack"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("central --unpack: %w", err)
	}
	defer nc.Close()
	opts := unpack.DefaultOptions()
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc, err := unpack.NewService(nc, nil, opts)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}
