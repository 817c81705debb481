package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestIngestInOrderExactlyOnce: several drones through a real mosquitto into
// a real store; every (drone, seq) once, in order; acks drained the session.
func TestIngestInOrderExactlyOnce(t *testing.T) {
	b := startBroker(t)
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	in, stop := runIngester(t, testConfig(b.URL(), "agent-a"), s, st, nil)
	// A first start has no session yet: publish only once subscribed.
	select {
	case <-in.Subscribed():
	case <-time.After(10 * time.Second):
		t.Fatal("not subscribed")
	}
	const drones, n = 4, 300
	res, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: drones, Count: n, Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != drones*n {
		t.Fatalf("published %d", res.Published)
	}
	testkit.WaitFor(t, 20*time.Second, "all appended", func() bool { return in.Stats().Appended == drones*n })
	testkit.WaitFor(t, 10*time.Second, "offline statuses", func() bool { return in.Stats().WritersClosed >= drones })
	time.Sleep(100 * time.Millisecond) // a window for a spurious will: the counts below are exact
	if g := in.Stats(); g.StatusOffline != drones || g.StatusOnline != drones {
		t.Fatalf("each drone must go online and offline once (a graceful disconnect sends no last will): %+v", g)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for i := 1; i <= drones; i++ {
		want[mqttsim.Config{}.DroneName(i)] = n
	}
	if msg := verifyExactlyOnce(readAll(t, st), want); msg != "" {
		t.Fatal(msg)
	}
	st2 := in.Stats()
	if st2.TimeEstimated != 0 || st2.DuplicatesSkipped != 0 {
		t.Fatalf("stats %+v", st2)
	}
}

// TestRedeliveryAfterAppendIsNotStoredTwice: the first agent appends but
// never acks (a crash between append and PUBACK); the broker redelivers with
// DUP set to the next agent, which must ack them without storing them again
// — whether their dedup records are in the journal or, as stores written
// before it hold them, in a key per packet id.
func TestRedeliveryAfterAppendIsNotStoredTwice(t *testing.T) {
	b := startBroker(t)
	dir := t.TempDir()
	s, st := openStore(t, dir)
	cfg := testConfig(b.URL(), "agent-dup")
	subscribeOnce(t, b.URL(), cfg.ClientID, "drones/+/telemetry/#", "drones/+/status")
	const n = 200
	if _, err := mqttsim.Simulate(context.Background(), mqttsim.Config{Broker: b.URL(), Drones: 2, Count: n, Window: 8, NoStatus: true}); err != nil {
		t.Fatal(err)
	}
	in1, stop1 := runIngester(t, cfg, s, st, nil)
	in1.dropAcks.Store(true)
	testkit.WaitFor(t, 20*time.Second, "first run appended", func() bool { return in1.Stats().Appended == 2*n })
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	// The first half of each journal entry's records becomes keys of the
	// layout before the journal (older than any journal entry; the packet
	// ids are distinct, every message being unacked); and a key that does
	// not decode, for an id not in use.
	journal := DedupPrefix + cfg.ClientID + "/j/"
	m, err := s.ScanMeta(journal)
	if err != nil {
		t.Fatal(err)
	}
	converted := 0
	for k, v := range m {
		half := len(v) / dedup.JournalLen / 2 * dedup.JournalLen
		for r := v[:half]; len(r) > 0; r = r[dedup.JournalLen:] {
			var h dedup.Hash
			copy(h[:], r[3:dedup.JournalLen])
			if err := s.PutMeta(dedup.Key(cfg.ClientID, uint16(r[1])<<8|uint16(r[2])), dedup.Encode(h)); err != nil {
				t.Fatal(err)
			}
			converted++
		}
		if err := s.PutMeta(k, v[half:]); err != nil {
			t.Fatal(err)
		}
	}
	if converted == 0 || converted == 2*n {
		t.Fatalf("%d of %d records converted", converted, 2*n)
	}
	if err := s.PutMeta(dedup.Key(cfg.ClientID, 65000), []byte{dedup.EntryVersion}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, st = openStore(t, dir)
	defer s.Close()
	in2, stop2 := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 20*time.Second, "redeliveries skipped", func() bool { return in2.Stats().DuplicatesSkipped == 2*n })
	time.Sleep(300 * time.Millisecond) // a window for a redelivery that would be stored: none may be
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if got := in2.Stats(); got.Appended != 0 || got.DedupLoaded != 2*n || got.DedupCorrupt != 1 {
		t.Fatalf("second run: %+v", got)
	}
	if msg := verifyExactlyOnce(readAll(t, st), map[string]uint64{"drone-1": n, "drone-2": n}); msg != "" {
		t.Fatal(msg)
	}
	// And the acks of the second run emptied the session: a third run gets nothing.
	in3, stop3 := runIngester(t, cfg, s, st, nil)
	testkit.WaitFor(t, 10*time.Second, "third connect", func() bool { return in3.Stats().Connects > 0 })
	time.Sleep(500 * time.Millisecond) // a window: what the session still held would arrive in it
	stop3()
	if got := in3.Stats(); got.Received != 0 {
		t.Fatalf("third run received %d: acks were not sent", got.Received)
	}
}

// TestRunOnce: ctx is the one way to stop an ingester; Run on an ended
// ctx returns at once, and an ingester that ran does not run again.
func TestRunOnce(t *testing.T) {
	in, err := New(testConfig("tcp://127.0.0.1:1", "once"), Sink{Stream: nilAppender{}, Meta: nilMeta{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := in.Run(ctx); err != nil {
		t.Fatalf("Run on an ended ctx: %v", err)
	}
	if err := in.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Run: %v, want ErrClosed", err)
	}
}
