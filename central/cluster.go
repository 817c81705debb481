package central

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
)

// StartLocalCluster starts n nodes on loopback that form one JetStream
// cluster named name, each with its files under dataDir, and waits until
// JetStream answers on every node. Ports are picked free. It is meant for
// tests and demos of failover on one machine; for a real deployment run
// `edge-agent central` with cluster flags on three hosts.
func StartLocalCluster(ctx context.Context, dataDir, name string, n int, noAdvertise bool, logger *slog.Logger) ([]*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: cluster of %d nodes", ErrConfig, n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(ports[n+i])
	}
	nodes := make([]*Server, 0, n)
	closeAll := func() {
		for _, s := range nodes {
			s.Close()
		}
	}
	for i := range n {
		s, err := New(Config{
			Listen:        "127.0.0.1:" + strconv.Itoa(ports[i]),
			DataDir:       dataDir,
			ServerName:    fmt.Sprintf("%s-%d", name, i),
			ClusterName:   name,
			ClusterListen: "127.0.0.1:" + strconv.Itoa(ports[n+i]),
			Routes:        routes,
			NoAdvertise:   noAdvertise,
			Logger:        logger,
		})
		if err != nil {
			closeAll()
			return nil, err
		}
		if err := s.Start(); err != nil {
			closeAll()
			return nil, err
		}
		nodes = append(nodes, s)
	}
	for _, s := range nodes {
		if err := s.WaitJetStream(ctx); err != nil {
			closeAll()
			return nil, err
		}
	}
	return nodes, nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(fmt.Errorf("central: free port"), err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
