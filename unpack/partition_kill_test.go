package unpack

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/wire"
)

// startPartitionChild starts the unpacker process of partition i of n.
func startPartitionChild(t *testing.T, urls []string, n, i int) *child {
	t.Helper()
	return startChild(t, urls, 0, "EDGE_UNPACK_PARTITIONS="+strconv.Itoa(n), "EDGE_UNPACK_PARTITION="+strconv.Itoa(i))
}

// stepDownTo moves stream's leader to node to with the stream leader
// step-down API and a preferred placement (nats-server 2.11+:
// $JS.API.STREAM.LEADER.STEPDOWN.<stream> with {"placement":
// {"preferred": <server name>}}), retrying until to leads.
func stepDownTo(t *testing.T, nc *nats.Conn, stream string, to *central.Server) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": to.Name()}})
	var last string
	if !testkit.UntilEvery(30*time.Second, time.Second, func() bool {
		if to.IsStreamLeader(stream) {
			return true
		}
		resp, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, req, 5*time.Second)
		if err != nil {
			last = err.Error()
			return false
		}
		last = string(resp.Data)
		return testkit.UntilEvery(3*time.Second, 50*time.Millisecond, func() bool { return to.IsStreamLeader(stream) })
	}) {
		t.Fatalf("%s: leader not moved to %s (last answer %s)", stream, to.Name(), last)
	}
}

// leaders says which node leads each partition ("-" while none does).
func leaders(nodes []*central.Server, parts []Partition) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = "-"
		for _, nd := range nodes {
			if nd.Running() && nd.IsStreamLeader(p.StreamName()) {
				out[i] = nd.Name()
			}
		}
	}
	return out
}

// TestPartitionsSurviveKillsAndLeaderChanges: an R3 cluster of three
// servers, 3 partitions whose stream leaders are moved onto the three
// different servers; agents of every partition replicate through link
// proxies that are cut, while each partition's unpacker process (as
// `central unpack --partitions 3 --partition i`) is SIGKILLed in turn
// and restarted, and one server is shut down and restarted. Every source
// event ends in exactly one partition, the one PartitionOf names, once,
// in the source's order, per drone 1..n. EDGE_SEED replays a run.
func TestPartitionsSurviveKillsAndLeaderChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test of a minute")
	}
	const n = 3
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 41))
	var agents []*testAgent
	for _, id := range agentsOverPartitions(n, 2, "gs-a", "gs.b") {
		agents = append(agents, newTestAgent(t, id, 2))
	}
	rig := startClusterRig(t, "partitions", agents, 5*time.Millisecond)
	nodes, urls, nc, proxies := rig.nodes, rig.urls, rig.nc, rig.proxies
	parts := Partitions(testStream, n)
	children := make([]*child, n)
	for i := range n {
		children[i] = startPartitionChild(t, urls, n, i)
	}
	testkit.WaitFor(t, 60*time.Second, "every partition to grow", func() bool {
		for _, p := range parts {
			if partitionLast(nc, p) < 50 {
				return false
			}
		}
		return true
	})
	// Partition i's leader on server i: three leaders, three servers.
	before := leaders(nodes, parts)
	for i, p := range parts {
		stepDownTo(t, nc, p.StreamName(), nodes[i])
	}
	placed := leaders(nodes, parts)
	t.Logf("partition leaders %v, moved to %v", before, placed)
	for i := range parts {
		if placed[i] != nodes[i].Name() {
			t.Fatalf("partition leaders %v, want %s on %s", placed, parts[i], nodes[i].Name())
		}
	}

	// Round i: partition i's unpacker SIGKILLed while its stream moves,
	// a random half of the links cut (at least one); in the middle round
	// a server (partition 1's leader) shut down until the partitions move
	// without it.
	kills := make([]int, n)
	var serverKills int
	var killed string
	for i, p := range parts {
		at, k := partitionLast(nc, p), uint64(1+rng.IntN(200))
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%s to move by %d", p, k), func() bool { return partitionLast(nc, p) >= at+k })
		children[i].kill(t)
		kills[i]++
		children[i] = startPartitionChild(t, urls, n, i)
		proxies[rng.IntN(len(proxies))].Cut()
		for _, px := range proxies {
			if rng.IntN(2) == 0 {
				px.Cut()
			}
		}
		if i == 1 {
			victim := nodes[1]
			killed = victim.Name()
			victim.Shutdown()
			serverKills++
			moved := make([]uint64, n)
			for j, q := range parts {
				moved[j] = partitionLast(nc, q)
			}
			testkit.WaitFor(t, 60*time.Second, "every partition to move with "+killed+" down", func() bool {
				for j, q := range parts {
					if partitionLast(nc, q) <= moved[j] {
						return false
					}
				}
				return true
			})
			t.Logf("%s shut down: partition leaders %v", killed, leaders(nodes, parts))
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := rig.stop(t, 90*time.Second)
	waitCurrent(t, nc, wire.StreamName(testStream))
	src := uint64(len(waitSource(t, nc, testStream, total(agents...))))
	testkit.WaitFor(t, 90*time.Second, "the unpackers to catch up", func() bool { return partitionsLast(nc, testStream, n) >= src })
	for _, p := range parts {
		waitCurrent(t, nc, p.StreamName())
	}
	for _, c := range children {
		c.kill(t)
	}
	events := verifyPartitions(t, nc, testStream, n, want)
	cuts := rig.cuts()
	per := make([]string, n)
	for i, p := range parts {
		per[i] = fmt.Sprintf("%s %d events (agents %v)", p, partitionLast(nc, p), agentsIn(agents, n, i))
	}
	t.Logf("unpacker SIGKILLs per partition %v, server shutdowns %d (%s), link cuts %d, leaders at the end %v; %d events once, each in its partition, in order: %s",
		kills, serverKills, killed, cuts, leaders(nodes, parts), events, strings.Join(per, "; "))
	for i := range n {
		if kills[i] != 1 {
			t.Fatalf("faults did not happen: kills per partition %v", kills)
		}
	}
	if serverKills != 1 || cuts == 0 {
		t.Fatalf("faults did not happen: %d server shutdowns, %d cuts", serverKills, cuts)
	}
}
