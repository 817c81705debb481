package unpack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/wire"
)

// fnv1a32 is FNV-1a 32-bit written out from its definition (offset
// basis 2166136261, prime 16777619), independent of hash/fnv.
func fnv1a32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// TestPartitionOf: the documented hash — FNV-1a 32 of the agent's
// subject token mod N — written out by hand, equal to nats-server's own
// subject mapping partition(N, k) over the agent token of a source
// subject, and pinned by a few values that docs/unpack.md shows.
func TestPartitionOf(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7} {
		tr, err := server.NewSubjectTransform("edge.telemetry.*.*", fmt.Sprintf("{{partition(%d,1)}}", n))
		if err != nil {
			t.Fatal(err)
		}
		for _, agent := range []string{"gs-1", "gs-2", "gs.b", "station/ä", "", "GS_9", strings.Repeat("x", 200)} {
			tok := wire.EscapeToken(agent)
			got := PartitionOf(agent, n)
			if want := int(fnv1a32(tok) % uint32(n)); got != want {
				t.Fatalf("PartitionOf(%q, %d) = %d, FNV-1a by hand %d", agent, n, got, want)
			}
			if nats := tr.TransformSubject("edge.telemetry." + tok + ".cut"); nats != fmt.Sprint(got) {
				t.Fatalf("PartitionOf(%q, %d) = %d, nats-server's partition(%d,1) %s", agent, n, got, n, nats)
			}
		}
	}
	// The examples of docs/unpack.md.
	for agent, want := range map[string]int{"gs-1": 1, "gs-3": 0, "gs-5": 2} {
		if got := PartitionOf(agent, 3); got != want {
			t.Fatalf("PartitionOf(%q, 3) = %d, docs/unpack.md says %d", agent, got, want)
		}
	}
	if PartitionOf("gs-2", 1) != 0 || PartitionOf("gs-2", 0) != 0 {
		t.Fatal("one partition is partition 0")
	}
}

// TestPartitionNames: one partition keeps the names of before; N
// partitions have a stream, a subject filter and per-drone subjects each.
func TestPartitionNames(t *testing.T) {
	whole := Partitions("telemetry", 1)
	if len(whole) != 1 || whole[0].StreamName() != "EDGEEV_TELEMETRY" || whole[0].Subjects() != "edgeev.telemetry.>" ||
		whole[0].EventSubject("gs.1", "drone-7") != "edgeev.telemetry.gs%2E1.drone-7" ||
		whole[0].EventSubject("gs-1", "drone-7") != EventSubject("telemetry", "gs-1", "drone-7") {
		t.Fatalf("one partition: %v %s %s", whole, whole[0].Subjects(), whole[0].EventSubject("gs.1", "drone-7"))
	}
	ps := Partitions("telemetry", 3)
	p := ps[PartitionOf("gs-5", 3)]
	if len(ps) != 3 || p.StreamName() != "EDGEEV_TELEMETRY_P2" || p.Subjects() != "edgeev.telemetry.p2.>" ||
		p.EventSubject("gs-5", "drone-7") != "edgeev.telemetry.p2.gs-5.drone-7" || p.EventSubject("gs-5", "gs-5") != "edgeev.telemetry.p2.gs-5.@" {
		t.Fatalf("partitions: %v; %s %s %s", ps, p.Subjects(), p.EventSubject("gs-5", "drone-7"), p.EventSubject("gs-5", "gs-5"))
	}
	for _, subj := range []string{"edgeev.telemetry.p2.gs-5.drone-7", "edgeev.telemetry.p2.gs-5.@"} {
		m, _ := derivedMsg(p, testEvent(), wire.WatermarkJSON{}, limit{})
		m.Subject = subj
		if _, err := Decode(m.Subject, m.Header, m.Data); err != nil {
			t.Fatalf("Decode(%q): %v", subj, err)
		}
	}
	for _, subj := range []string{"edgeev.telemetry.x2.gs-2.d", "edgeev.telemetry.p02.gs-2.d", "edgeev.telemetry.p-1.gs-2.d", "edgeev.telemetry.p.gs-2.d"} {
		if _, err := Decode(subj, nil, nil); err == nil {
			t.Fatalf("Decode(%q) took a bad partition token", subj)
		}
	}
}

// agentsOverPartitions returns ids (first the given ones, then gs-1,
// gs-2, …) until each of n partitions has at least per of them.
func agentsOverPartitions(n, per int, ids ...string) []string {
	count := make([]int, n)
	for _, id := range ids {
		count[PartitionOf(id, n)]++
	}
	for k := 1; ; k++ {
		enough := true
		for _, c := range count {
			enough = enough && c >= per
		}
		if enough {
			return ids
		}
		id := fmt.Sprintf("gs-%d", k)
		if count[PartitionOf(id, n)] < per {
			ids = append(ids, id)
			count[PartitionOf(id, n)]++
		}
	}
}

// TestPartitionedUnpackersWithStandbys: agents of every partition
// replicate while two unpackers per partition run (3 partitions); in each
// partition one is fenced and stands by, and takes over once the active
// one is stopped. Each partition's stream ends with exactly the source
// events of its agents (PartitionOf), once, in source order, on its
// agents' subjects; together every event. Then an unpacker of another
// partition count is refused, not let mix two hashes.
func TestPartitionedUnpackersWithStandbys(t *testing.T) {
	const n = 3
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	var agents []*testAgent
	for _, id := range agentsOverPartitions(n, 2, "gs.b") {
		agents = append(agents, newTestAgent(t, id, 2))
	}
	f := runFleet(t, agents, func(*testAgent) *nats.Conn { return connect(t, srv.ClientURL()) }, replicate.JetStreamOptions{}, 5*time.Millisecond)
	opts := Options{StandbyCheck: 200 * time.Millisecond, Logger: quiet()}
	type pair struct {
		u    [2]*Unpacker
		stop [2]func() error
	}
	pairs := make([]pair, n)
	start := func(i, k int) {
		u, err := NewPartition(nc, Partition{Stream: testStream, Index: i, Count: n}, opts)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- u.Run(runCtx) }()
		pairs[i].u[k], pairs[i].stop[k] = u, sync.OnceValue(func() error { stop(); return <-errc })
		t.Cleanup(func() { pairs[i].stop[k]() })
	}
	for i := range n {
		start(i, 0)
	}
	testkit.WaitFor(t, 60*time.Second, "every partition to grow", func() bool {
		for _, p := range Partitions(testStream, n) {
			if partitionLast(nc, p) < 100 {
				return false
			}
		}
		return true
	})
	for i := range n {
		start(i, 1)
	}
	// In each partition one of the two is fenced (a standby).
	active := make([]int, n)
	testkit.WaitFor(t, 30*time.Second, "one standby per partition", func() bool {
		for i, p := range pairs {
			s0, s1 := p.u[0].Stats(), p.u[1].Stats()
			switch {
			case s0.State == StateStandby && s1.State == StateActive:
				active[i] = 1
			case s1.State == StateStandby && s0.State == StateActive:
				active[i] = 0
			default:
				return false
			}
		}
		return true
	})
	at := make([]uint64, n)
	for i, p := range pairs {
		at[i] = partitionLast(nc, p.u[active[i]].Partition())
		if err := p.stop[active[i]](); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the standby of every partition to take over", func() bool {
		for i, p := range pairs {
			s := p.u[1-active[i]].Stats()
			if s.State != StateActive || s.DerivedSeq <= at[i]+50 {
				return false
			}
		}
		return true
	})
	want := f.stop(t, 30*time.Second)
	src := uint64(len(waitSource(t, nc, testStream, total(agents...))))
	testkit.WaitFor(t, 60*time.Second, "the standbys to catch up", func() bool { return partitionsLast(nc, testStream, n) == src })
	events := verifyPartitions(t, nc, testStream, n, want)
	for i, p := range pairs {
		s := p.u[1-active[i]].Stats()
		t.Logf("partition %d: %d agents' events up to seq %d by the first, then the standby took over (fenced %d, %d events)",
			i, len(agentsIn(agents, n, i)), at[i], s.Fenced, s.Events)
		if s.Fenced == 0 || s.Events == 0 || s.Derived != Partitions(testStream, n)[i].StreamName() || s.Partition != i || s.Partitions != n {
			t.Fatalf("partition %d standby stats %+v", i, s)
		}
	}
	t.Logf("%d events over %d partitions, each once, in its partition and in order", events, n)
	checkStarts(t, nc, n)

	// Another count is refused: partition 0 of 2 finds partition 0 of 3,
	// and one derived stream's subjects overlap the partitions'.
	for _, c := range []struct {
		u    func() (*Unpacker, error)
		want string
	}{
		{func() (*Unpacker, error) { return NewPartition(nc, Partition{Stream: testStream, Count: 2}, opts) }, "partition 0 of 3"},
		{func() (*Unpacker, error) { return New(nc, testStream, opts) }, "overlap"},
	} {
		u, err := c.u()
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = u.Run(rctx)
		rcancel()
		if !errors.Is(err, ErrDerivedMisconfigured) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want ErrDerivedMisconfigured naming %q", u.Partition(), err, c.want)
		}
		t.Logf("%s refused: %v", u.Partition(), err)
	}
}

// agentsIn are the agents of partition i of n.
func agentsIn(agents []*testAgent, n, i int) []string {
	var out []string
	for _, a := range agents {
		if PartitionOf(a.id, n) == i {
			out = append(out, a.id)
		}
	}
	return out
}

// TestUndecodablePackBlocksItsPartitionOnly: a pack that does not decode
// (from gs-9, partition 2 of 3) blocks partition 2's unpacker there,
// while partitions 0 and 1 (gs-3, gs-1) republish every event of their
// agents: an unpacker decodes only its partition's packs. Skipped by the
// operator, its skip marker lands in partition 2, on gs-9's subject.
func TestUndecodablePackBlocksItsPartitionOnly(t *testing.T) {
	const n = 3
	srv := rigs.StartCentral(t, central.Config{})
	nc := connect(t, srv.ClientURL())
	agents := []*testAgent{newTestAgent(t, "gs-3", 2), newTestAgent(t, "gs-1", 2)}
	if PartitionOf("gs-3", n) != 0 || PartitionOf("gs-1", n) != 1 || PartitionOf("gs-9", n) != 2 {
		t.Fatal("the agents are not in partitions 0, 1 and 2")
	}
	var reps []*replicate.Replicator
	for _, a := range agents {
		r, _ := a.replicate(t, connect(t, srv.ClientURL()), replicate.JetStreamOptions{})
		reps = append(reps, r)
	}
	round := func() {
		for _, a := range agents {
			for range 10 {
				if err := a.appendRound(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, a := range agents {
			a.waitReplicated(t, reps[i], 30*time.Second)
		}
	}
	round()
	bad := badPack(t, nc, "version") // from gs-9
	js, _ := jetstream.New(nc)
	pa, err := js.PublishMsg(context.Background(), bad)
	if err != nil {
		t.Fatal(err)
	}
	round()
	parts := Partitions(testStream, n)
	run := func(opts Options) (*Service, func()) {
		opts.Partitions, opts.Logger = n, quiet()
		svc, err := NewService(nc, []string{testStream}, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		stop := sync.OnceFunc(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		t.Cleanup(stop)
		return svc, stop
	}
	svc, stop := run(Options{})
	testkit.WaitFor(t, 30*time.Second, "partitions 0 and 1 to hold their agents' events, partition 2 blocked", func() bool {
		st := svc.Stats()
		return len(st) == n && partitionLast(nc, parts[0]) == uint64(total(agents[0])) && partitionLast(nc, parts[1]) == uint64(total(agents[1])) &&
			st[2].State == StateBlocked
	})
	for i, s := range svc.Stats() {
		t.Logf("partition %d: state %s, blocked at %d, corrupt %d, events %d", i, s.State, s.BlockedSeq, s.Corrupt, s.Events)
		if i < 2 && (s.State != StateActive || s.Corrupt != 0) || i == 2 && (s.BlockedSeq != pa.Sequence || s.Corrupt != 1) {
			t.Fatalf("partition %d stats %+v (the bad pack is source seq %d)", i, s, pa.Sequence)
		}
	}
	stop()
	_, stop = run(Options{Skip: []uint64{pa.Sequence}})
	testkit.WaitFor(t, 30*time.Second, "the skip marker in partition 2", func() bool { return partitionLast(nc, parts[2]) == 1 })
	stop()
	der, _, subjects := readDerived(t, nc, parts[2])
	if len(der) != 1 || der[0].Seq != pa.Sequence || !strings.Contains(der[0].Dropped, "skipped") || subjects[0] != "edgeev.telemetry.p2.gs-9.%" {
		t.Fatalf("partition 2: %+v on %v", der, subjects)
	}
	// Partitions 0 and 1: each its agent's events, per drone 1..n in order
	// (the source cannot be read whole past the bad pack to compare).
	for i, a := range agents {
		der, _, _ := readDerived(t, nc, parts[i])
		got := map[string]int{}
		for _, d := range der {
			var m droneMsg
			if err := json.Unmarshal(d.Record.Payload, &m); err != nil || d.Agent != a.id || m.Seq != got[m.Drone]+1 {
				t.Fatalf("%s: agent %s drone %s seq %d after %d (%v)", parts[i], d.Agent, m.Drone, m.Seq, got[m.Drone], err)
			}
			got[m.Drone] = m.Seq
		}
		if fmt.Sprint(got) != fmt.Sprint(a.counts()) {
			t.Fatalf("%s: per drone %v, agent %s appended %v", parts[i], got, a.id, a.counts())
		}
	}
}
