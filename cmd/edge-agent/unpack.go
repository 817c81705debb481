package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/unpack"
)

// runCentralUnpack is `edge-agent central unpack`: the unpack service
// against a running centre (docs/unpack.md).
func runCentralUnpack(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("central unpack", stderr)
	conn := addCentralFlags(fs)
	var streams stringList
	fs.Var(&streams, "stream", "stream `NAME` to unpack (repeatable; default: every EDGE_<STREAM> at the centre, looked for every 10 s)")
	replicas := fs.Int("replicas", 0, "replicas of a derived stream it creates (0: as its source stream)")
	var skips stringList
	fs.Var(&skips, "skip", "source `SEQ` of the one --stream to skip if it does not decode (a pack of a newer version, a failed checksum); a skip marker in the derived stream names it (repeatable)")
	status := fs.String("status", "", "serve GET /status (JSON: each stream's state, counters and error) on `HOST:PORT`")
	partitions := fs.Int("partitions", 1, "split each derived stream into `N` by agent: EDGEEV_<STREAM>_P<i> on edgeev.<stream>.p<i>.<agent>.<drone>, i = FNV-1a-32(agent token) mod N (docs/unpack.md); 1: EDGEEV_<STREAM>")
	partition := fs.Int("partition", -1, "with --partitions, run partition `I` only (0..N-1; default every partition)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts := unpack.DefaultOptions()
	opts.Replicas = *replicas
	if *partitions < 1 || *partitions > unpack.MaxPartitions {
		return usagef("--partitions %d: want 1..%d", *partitions, unpack.MaxPartitions)
	}
	opts.Partitions = *partitions
	if *partition != -1 {
		if *partition < 0 || *partition >= *partitions {
			return usagef("--partition %d: want 0..%d (one of --partitions %d)", *partition, *partitions-1, *partitions)
		}
		opts.Only = []int{*partition}
	}
	for _, v := range skips {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil || seq == 0 {
			return usagef("--skip %q: want a source stream sequence (1 or more)", v)
		}
		opts.Skip = append(opts.Skip, seq)
	}
	if len(skips) > 0 && len(streams) != 1 {
		return usagef("--skip names sequences of one source stream: give exactly one --stream with it")
	}
	opts.Logger = levelLogger(stderr, "info")
	for _, s := range streams {
		if err := localstream.ValidateStreamName(s); err != nil {
			return usagef("--stream: %v", err)
		}
	}
	if *replicas < 0 || *replicas > 5 {
		return usagef("--replicas %d: want 0 (as the source) or 1..5", *replicas)
	}
	cfg, err := conn.config("edge-agent-unpack")
	if err != nil {
		return err
	}
	nc, err := replicate.Connect(cfg, opts.Logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := unpack.NewService(nc, streams, opts)
	if err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(stdout, "central unpack: %s → %s\n", nc.ConnectedUrlRedacted(), unpackTarget(*partitions, *partition))
	if *status == "" {
		return svc.Run(ctx)
	}
	ln, err := net.Listen("tcp", *status)
	if err != nil {
		return usagef("--status %s: %v", *status, err)
	}
	fmt.Fprintf(stdout, "central unpack: status on http://%s/status\n", ln.Addr())
	g, gctx := errgroup.WithContext(ctx)
	hs := &http.Server{Handler: unpackStatusHandler(svc), ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		defer hs.Close()
		return svc.Run(gctx)
	})
	return g.Wait()
}

// unpackTarget says which derived streams the service writes.
func unpackTarget(n, only int) string {
	switch {
	case n <= 1:
		return "EDGEEV_<STREAM> (edgeev.<stream>.<agent>.<drone>)"
	case only >= 0:
		return fmt.Sprintf("EDGEEV_<STREAM>_P%d (edgeev.<stream>.p%d.<agent>.<drone>), partition %d of %d", only, only, only, n)
	default:
		return fmt.Sprintf("EDGEEV_<STREAM>_P0 … _P%d (edgeev.<stream>.p<i>.<agent>.<drone>), all %d partitions", n-1, n)
	}
}

// unpackStatus is the JSON document at `central unpack --status`'s
// /status: one entry per source stream and partition, in start order.
type unpackStatus struct {
	Streams []unpack.Stats `json:"streams"`
}

func unpackStatusHandler(svc *unpack.Service) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(unpackStatus{Streams: svc.Stats()})
	})
	return mux
}

// runUnpackBeside runs the unpack service inside `edge-agent central
// --unpack`, on an in-process connection to the node (no TCP loopback:
// less CPU per event, see docs/unpack.md).
func runUnpackBeside(ctx context.Context, node nats.InProcessConnProvider, partitions int, stderr io.Writer) error {
	nc, err := nats.Connect("", nats.InProcessServer(node), nats.Name("edge-agent-unpack"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("central --unpack: %w", err)
	}
	defer nc.Close()
	opts := unpack.DefaultOptions()
	opts.Logger = levelLogger(stderr, "info")
	opts.Partitions = partitions
	svc, err := unpack.NewService(nc, nil, opts)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}
