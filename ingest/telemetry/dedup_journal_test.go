package telemetry

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
)

// TestBrokerDedupJournal: the broker client's dedup records are a journal
// of one entry per store commit, not a Badger entry per message; entries
// whose every record is superseded — a previous run's journal entries and
// keys of the layout before it — are deleted, at Run's start and every
// dedup.GCEvery messages, and no live entry is.
func TestBrokerDedupJournal(t *testing.T) {
	b := startBroker(t)
	if b.Embedded() {
		t.Skip("the test relies on mosquitto's packet ids (1, 2, … per session); this test needs mosquitto")
	}
	defer func(n int) { dedup.GCEvery = n }(dedup.GCEvery)
	dedup.GCEvery = 50
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	cfg := testConfig(b.URL(), "agent-journal")
	bd := newBrokerDedup(s, cfg.ClientID)

	// A previous run's entries. Keys of the layout before the journal:
	// ids 1–20 (superseded by the journal below, dead at start) and 60100
	// (live). Then a journal entry per id (one append per commit): ids
	// 1–100, which this run's messages reuse, and 60001–60040, which they
	// do not.
	prev := map[uint16]dedup.Hash{}
	prevHash := func(pid uint16, layout string) dedup.Hash {
		return dedup.HashMessage("drones/prev/telemetry", fmt.Appendf(nil, `{"%s":%d}`, layout, pid))
	}
	for _, pid := range append(seq(1, 20), 60100) {
		prev[pid] = prevHash(pid, "old")
		if err := s.PutMeta(dedup.Key(cfg.ClientID, pid), dedup.Encode(prev[pid])); err != nil {
			t.Fatal(err)
		}
	}
	other, err := s.CreateStream("previous", localstream.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range append(seq(1, 100), seq(60001, 60040)...) {
		prev[pid] = prevHash(pid, "journal")
		ev := localstream.Event{RoutingKey: "prev", Writer: "prev", Payload: []byte("x")}
		if _, err := other.Append(context.Background(), ev, localstream.WithJournal(bd.journal, dedup.JournalRecord(pid, prev[pid]))); err != nil {
			t.Fatal(err)
		}
	}

	in, stop := runIngester(t, cfg, s, st, nil)
	select {
	case <-in.Subscribed():
	case <-time.After(10 * time.Second):
		t.Fatal("not subscribed")
	}
	pub := publisher(t, b.URL())
	sent := map[dedup.Hash]bool{}
	publish := func(from, to int) {
		t.Helper()
		var last []func() bool
		for i := from; i <= to; i++ {
			topic := fmt.Sprintf("drones/d%d/telemetry", i%3)
			payload := fmt.Sprintf(`{"seq":%d}`, i)
			sent[dedup.HashMessage(topic, []byte(payload))] = true
			tok := pub.Publish(topic, 1, false, payload)
			last = append(last, func() bool { return tok.WaitTimeout(10*time.Second) && tok.Error() == nil })
		}
		for _, ok := range last {
			if !ok() {
				t.Fatal("publish failed")
			}
		}
	}
	const n = 600
	publish(1, n)
	testkit.WaitFor(t, 20*time.Second, "all appended", func() bool { return in.Stats().Appended == n })
	// Every id 1–600 is durable: the collection asked for by the next
	// dedup.GCEvery messages sees ids 1–100 of the previous run superseded.
	publish(n+1, n+dedup.GCEvery)
	const dead = 20 + 100
	testkit.WaitFor(t, 20*time.Second, "superseded entries collected", func() bool { return in.Stats().DedupCollected >= dead })
	testkit.WaitFor(t, 20*time.Second, "all appended", func() bool { return in.Stats().Appended == n+uint64(dedup.GCEvery) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := in.Stats(); got.DedupCollected != dead || got.DedupLoaded != uint64(len(prev)) || got.DedupErrors != 0 {
		t.Fatalf("collected %d (want %d), loaded %d (want %d), errors %d", got.DedupCollected, dead, got.DedupLoaded, len(prev), got.DedupErrors)
	}

	// Coalesced: this run's records are in a few entries, no key per id.
	m, err := s.ScanMeta(bd.prefix)
	if err != nil {
		t.Fatal(err)
	}
	entries, records := 0, 0
	for k, v := range m {
		if _, ok := localstream.JournalSeq(bd.journal, k); !ok {
			if h, err := dedup.Decode(v); err == nil && sent[h] {
				t.Fatalf("key %q per message", k)
			}
			continue
		}
		var h dedup.Hash
		copy(h[:], v[3:dedup.JournalLen])
		if sent[h] {
			entries++
			records += len(v) / dedup.JournalLen
		}
	}
	t.Logf("%d messages: %d journal entries holding %d records; %d store commits", len(sent), entries, records, s.Stats().Commits)
	if records != len(sent) || entries > len(sent)/4 {
		t.Fatalf("%d journal entries holding %d records for %d messages: not one entry per commit", entries, records, len(sent))
	}

	// Nothing superseded is left, and every id keeps its newest record:
	// this run's message for the ids it used, the previous run's for the
	// others.
	known, deadNow, corrupt, err := dedup.ReadJournal(s, bd.prefix, bd.journal)
	if err != nil {
		t.Fatal(err)
	}
	if len(deadNow) != 0 || corrupt != 0 {
		t.Fatalf("after the collection: %d dead entries, %d corrupt records", len(deadNow), corrupt)
	}
	seen := map[dedup.Hash]bool{}
	for pid, h := range known {
		switch {
		case sent[h] && !seen[h]:
			seen[h] = true
		case pid > 60000 && h == prev[pid]:
		default:
			t.Fatalf("packet id %d holds %x: neither its newest message nor a live entry of the previous run", pid, h)
		}
	}
	if len(seen) != len(sent) || len(known) != len(sent)+41 {
		t.Fatalf("%d of %d messages have their entry; %d packet ids known, want %d", len(seen), len(sent), len(known), len(sent)+41)
	}
}

// seq returns from, from+1, …, to.
func seq(from, to uint16) []uint16 {
	var out []uint16
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestReadDedupJournalCorrupt: records and values that do not decode are
// counted and catch nothing; a corrupt key of the layout before the
// journal is deleted once a newer record supersedes it; other clients'
// keys under the prefix are left alone.
func TestReadDedupJournalCorrupt(t *testing.T) {
	s, st := openStore(t, t.TempDir())
	defer s.Close()
	bd := newBrokerDedup(s, "c")
	h1, h2 := dedup.HashMessage("t", []byte("1")), dedup.HashMessage("t", []byte("2"))
	for k, v := range map[string][]byte{
		dedup.Key("c", 1):   {dedup.EntryVersion, 1, 2}, // corrupt, superseded below
		dedup.Key("c", 2):   {9},                        // corrupt, live
		dedup.Key("c", 3):   dedup.Encode(h1),           // superseded below
		dedup.Key("c/x", 3): dedup.Encode(h1),           // another client's
	} {
		if err := s.PutMeta(k, v); err != nil {
			t.Fatal(err)
		}
	}
	rec := append(append(dedup.JournalRecord(1, h1), dedup.JournalRecord(3, h2)...), 7, 7, 7) // 3 bytes that do not decode
	ev := localstream.Event{RoutingKey: "d", Writer: "d", Payload: []byte("x")}
	if _, err := st.Append(context.Background(), ev, localstream.WithJournal(bd.journal, rec)); err != nil {
		t.Fatal(err)
	}
	known, dead, corrupt, err := dedup.ReadJournal(s, bd.prefix, bd.journal)
	if err != nil {
		t.Fatal(err)
	}
	if corrupt != 3 || len(known) != 2 || known[1] != h1 || known[3] != h2 {
		t.Fatalf("known %x, %d corrupt; want ids 1 and 3 from the journal, 3 corrupt", known, corrupt)
	}
	if slices.Sort(dead); !slices.Equal(dead, []string{dedup.Key("c", 1), dedup.Key("c", 3)}) {
		t.Fatalf("dead %q", dead)
	}
	// The collection's scan (no known map) finds the same dead keys.
	none, gcDead, gcCorrupt, err := dedup.ScanJournal(s, bd.prefix, bd.journal, false)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(gcDead); none != nil || gcCorrupt != corrupt || !slices.Equal(gcDead, dead) {
		t.Fatalf("collection's scan: known %x, dead %q, %d corrupt; want none, %q, %d", none, gcDead, gcCorrupt, dead, corrupt)
	}
}

// BenchmarkDedupCollect: a client's journal as a collection finds it after
// dedup.GCEvery messages (two records for every packet id, in entries of
// 64 records — a 64-message commit), scanned by the collection
// (dedup.ScanJournal without the known map) and by a DUP's lookup
// (dedup.ReadJournal).
func BenchmarkDedupCollect(b *testing.B) {
	s, st := openStore(b, b.TempDir())
	defer s.Close()
	bd := newBrokerDedup(s, "c")
	var rec []byte
	for i := range 2 << 16 {
		rec = append(rec, dedup.JournalRecord(uint16(i), dedup.HashMessage("t", []byte(strconv.Itoa(i))))...)
		if len(rec) == 64*dedup.JournalLen {
			ev := localstream.Event{RoutingKey: "d", Writer: "d", Payload: []byte("x")}
			if _, err := st.Append(context.Background(), ev, localstream.WithJournal(bd.journal, rec)); err != nil {
				b.Fatal(err)
			}
			rec = nil
		}
	}
	for _, c := range []struct {
		name      string
		withKnown bool
	}{{"collection", false}, {"lookup", true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, err := dedup.ScanJournal(s, bd.prefix, bd.journal, c.withKnown); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
