package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestDiskFullPausesWithoutLoss: while the store refuses appends for lack
// of disk space, telemetry is held unacknowledged at the broker (counted),
// the ingester keeps running, and once space returns every message is
// stored exactly once, in order.
func TestDiskFullPausesWithoutLoss(t *testing.T) {
	brk := startBroker(t)
	var free atomic.Int64
	free.Store(1 << 30)
	s, err := localstream.Open(t.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler),
		MinFreeBytes: 64 << 20, FreeSpace: func(string) (int64, error) { return free.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	in, stop := runIngester(t, testConfig(brk.URL(), "agent-diskfull"), s, st, nil)
	<-in.Subscribed()

	free.Store(1 << 20) // below the floor
	testkit.WaitFor(t, 5*time.Second, "the store measuring the disk below its floor", s.BelowFloor)
	res, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: brk.URL(), Drones: 3, Count: 40, Rate: 200, NoStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "a disk-full wait", func() bool { return in.Stats().DiskFullWaits > 0 })
	if n := in.Stats().Appended; n != 0 {
		t.Fatalf("%d appended while the disk was full", n)
	}
	free.Store(1 << 30) // space returns
	testkit.WaitFor(t, 30*time.Second, "all messages stored", func() bool { return in.Stats().Appended == res.Published })
	want := map[string]uint64{}
	for d, r := range res.Drones {
		want[d] = r.LastSeq
	}
	if msg := verifyExactlyOnce(readAll(t, st), want); msg != "" {
		t.Fatal(msg)
	}
	if err := stop(); err != nil {
		t.Fatalf("ingester stopped with %v", err)
	}
}

// TestStopWhileWaitingForSpace: a stop while telemetry waits for disk space
// returns promptly (it hung for good: the wait only ended on a store
// error), acknowledges nothing it did not store, and the next run stores
// every message exactly once once space is back.
func TestStopWhileWaitingForSpace(t *testing.T) {
	brk := startBroker(t)
	var free atomic.Int64
	free.Store(1 << 20) // below the floor from the start
	s, err := localstream.Open(t.TempDir(), localstream.Options{Logger: slog.New(slog.DiscardHandler),
		MinFreeBytes: 64 << 20, FreeSpace: func(string) (int64, error) { return free.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.CreateStream("telemetry", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brk.URL(), "agent-diskfull-stop")
	in, stop := runIngester(t, cfg, s, st, nil)
	<-in.Subscribed()
	res, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: brk.URL(), Drones: 2, Count: 20, Rate: 500, NoStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "a disk-full wait", func() bool { return in.Stats().DiskFullWaits > 0 })

	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop while waiting for space: %v", err)
		}
		t.Logf("stopped %v after the stop request, while waiting for space", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the ingester did not stop within 5s while waiting for disk space")
	}
	if n := in.Stats().Appended; n != 0 {
		t.Fatalf("%d appended while the disk was full", n)
	}

	free.Store(1 << 30) // space returns; the broker redelivers to the next run
	in2, stop2 := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 30*time.Second, "all messages stored", func() bool { return in2.Stats().Appended == res.Published })
	want := map[string]uint64{}
	for d, r := range res.Drones {
		want[d] = r.LastSeq
	}
	if msg := verifyExactlyOnce(readAll(t, st), want); msg != "" {
		t.Fatal(msg)
	}
	if err := stop2(); err != nil {
		t.Fatalf("ingester stopped with %v", err)
	}
}
