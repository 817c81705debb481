package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/unpack"
)

func init() {
	commands["central"] = command{
		summary:     "run an embedded JetStream server (the central store) for one box, a demo or an R3 cluster; `central unpack`: per-drone events from the packed streams",
		run:         runCentral,
		subcommands: []string{"unpack"},
	}
}

func runCentral(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "unpack" {
		return runCentralUnpack(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("central", stderr)
	listen := fs.String("listen", "127.0.0.1:4222", "client `HOST:PORT`")
	dataDir := fs.String("data-dir", "", "JetStream data `DIR` (required)")
	name := fs.String("server-name", "", "node name, unique in a cluster and stable across restarts (standalone: kept in the data dir at the first start, default edge-central-<port>; another name on that data dir is refused)")
	clusterName := fs.String("cluster-name", "", "cluster `NAME` (all members the same)")
	clusterListen := fs.String("cluster-listen", "", "route `HOST:PORT` of this member")
	routes := fs.String("routes", "", "comma-separated route `URLS` of the members (nats://host:port,...)")
	noAdvertise := fs.Bool("no-advertise", false, "do not advertise other members' client URLs to clients")
	withUnpack := fs.Bool("unpack", false, "also run the unpack service on this node (per-drone events in EDGEEV_<STREAM>; docs/unpack.md); on every node of a cluster, one is active, the others stand by")
	unpackPartitions := fs.Int("unpack-partitions", 1, "with --unpack, split each derived stream into `N` partitions by agent (as `central unpack --partitions`)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *unpackPartitions < 1 || *unpackPartitions > unpack.MaxPartitions {
		return usagef("--unpack-partitions %d: want 1..%d", *unpackPartitions, unpack.MaxPartitions)
	}
	cfg := central.Config{
		Listen:        *listen,
		DataDir:       *dataDir,
		ServerName:    *name,
		ClusterName:   *clusterName,
		ClusterListen: *clusterListen,
		NoAdvertise:   *noAdvertise,
		Logger:        commandLogger(stderr),
	}
	if *routes != "" {
		cfg.Routes = strings.Split(*routes, ",")
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	srv, err := central.New(cfg)
	if err != nil {
		return usagef("%v", err)
	}
	defer srv.Close()
	if err := srv.Start(); err != nil {
		if errors.Is(err, central.ErrServerName) {
			return usagef("%v", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "central: JetStream listening on %s (server name %s, data %s)\n", srv.ClientURL(), srv.Name(), srv.StoreDir())
	if !*withUnpack {
		return srv.Run(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runUnpackBeside(gctx, srv, *unpackPartitions, stderr) })
	g.Go(func() error { return srv.Run(gctx) })
	return g.Wait()
}
