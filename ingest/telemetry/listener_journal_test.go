package telemetry

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/localstream"
)

// pipeline publishes msgs (packet id → payload, in order) on c as QoS 1
// without waiting, then reads one PUBACK each, in order.
func pipeline(t *testing.T, c net.Conn, topic string, dup bool, ids []uint16, payloads []string) {
	t.Helper()
	w := bufio.NewWriter(c)
	for i, id := range ids {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Qos, p.MessageID, p.Dup, p.Payload = topic, 1, id, dup, []byte(payloads[i])
		if err := p.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for _, id := range ids {
		ack, err := packets.ReadPacket(r)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := ack.(*packets.PubackPacket); !ok || a.MessageID != id {
			t.Fatalf("got %v, want PUBACK %d", ack, id)
		}
	}
}

// journalEntries returns the number of a listener client's journal
// entries and of the records in them.
func journalEntries(t *testing.T, s *localstream.Store, client string) (entries, records int) {
	t.Helper()
	m, err := s.ScanMeta(dedup.ListenPrefix(client) + "j/")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range m {
		entries++
		records += len(v) / dedup.JournalLen
	}
	return entries, records
}

// TestListenerDedupJournal: a persistent session's dedup records are a
// journal of one entry per store commit, not a Badger entry per message;
// the newest record of each packet id catches a resend — after a
// reconnect and after the agent restarts — including an entry written
// before the journal; superseded entries are deleted, so the journal
// keeps at most one entry per packet id in use.
func TestListenerDedupJournal(t *testing.T) {
	defer func(n int) { dedup.GCEvery = n }(dedup.GCEvery)
	dedup.GCEvery = 700
	const client, topic, ids, rounds = "jr", "drones/j/telemetry", 500, 6
	dir := t.TempDir()
	s, st := openStore(t, dir)
	defer func() { s.Close() }()
	// An entry as stores before the journal wrote it: packet id 9.
	if err := s.PutMeta(dedup.ListenPrefix(client)+"9", dedup.Encode(dedup.HashMessage(topic, []byte(`{"old":9}`)))); err != nil {
		t.Fatal(err)
	}
	in, stop := startListener(t, listenConfig(), s, st, nil)
	c1 := dialRaw(t, in.ListenAddr().String())
	if rawConnect(t, c1, client, false, 30, nil) != 0 {
		t.Fatal("refused")
	}
	pipeline(t, c1, topic, true, []uint16{9}, []string{`{"old":9}`}) // stored before the journal: skipped
	// rounds × ids messages; each round reuses every packet id once its
	// previous message is acked, as a client does.
	payload := func(i int) string { return fmt.Sprintf(`{"seq":%d}`, i) }
	for r := range rounds {
		var pids []uint16
		var pls []string
		for i := range ids {
			pids, pls = append(pids, uint16(i+1)), append(pls, payload(r*ids+i))
		}
		pipeline(t, c1, topic, false, pids, pls)
	}
	entries, records := journalEntries(t, s, client)
	got := in.Stats()
	t.Logf("%d messages: %d journal entries holding %d records; %d collected; %d commits", rounds*ids, entries, records, got.ListenerDedupCollected, s.Stats().Commits)
	if entries >= rounds*ids/4 {
		t.Fatalf("%d journal entries for %d messages: not one per commit", entries, rounds*ids)
	}
	if got.ListenerDedupCollected == 0 {
		t.Fatal("no superseded entry was deleted")
	}
	if v, ok, _ := s.GetMeta(dedup.ListenPrefix(client) + "9"); ok {
		t.Fatalf("the entry before the journal (%x) outlived its packet id's reuse", v)
	}
	// Reconnect: the newest message of every id comes again (DUP), and
	// one DUP whose content is an older message of its id is new.
	newest := map[uint16]string{}
	for i := range ids {
		newest[uint16(i+1)] = payload((rounds-1)*ids + i)
	}
	resend := func(c net.Conn) {
		t.Helper()
		var pids []uint16
		var pls []string
		for i := range ids {
			pids, pls = append(pids, uint16(i+1)), append(pls, newest[uint16(i+1)])
		}
		pipeline(t, c, topic, true, pids, pls)
	}
	c2 := dialRaw(t, in.ListenAddr().String())
	if rawConnect(t, c2, client, false, 30, nil) != 0 {
		t.Fatal("refused")
	}
	if entries, _ := journalEntries(t, s, client); entries > ids {
		t.Fatalf("%d journal entries after the collection at CONNECT, for %d packet ids", entries, ids)
	}
	resend(c2)
	pipeline(t, c2, topic, true, []uint16{5}, []string{payload(4)}) // id 5's first message, not its newest: new
	newest[5] = payload(4)
	// A message stored after the session read its entries, resent on the
	// same connection (clients should not, but one may): still caught.
	pipeline(t, c2, topic, false, []uint16{7}, []string{`{"late":7}`})
	pipeline(t, c2, topic, true, []uint16{7}, []string{`{"late":7}`})
	newest[7] = `{"late":7}`
	if got := in.Stats(); got.DuplicatesSkipped != 2+ids {
		t.Fatalf("%d duplicates skipped, want %d", got.DuplicatesSkipped, 2+ids)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The agent restarts: the journal is all it knows.
	in2, stop2 := startListener(t, listenConfig(), s, st, nil)
	defer stop2()
	c3 := dialRaw(t, in2.ListenAddr().String())
	if rawConnect(t, c3, client, false, 30, nil) != 0 {
		t.Fatal("refused")
	}
	resend(c3)
	if got := in2.Stats(); got.DuplicatesSkipped != ids || got.Appended != 0 {
		t.Fatalf("after a restart: %d duplicates skipped, %d appended; want %d and 0", got.DuplicatesSkipped, got.Appended, ids)
	}
	recs := readAll(t, st)
	if len(recs) != rounds*ids+2 {
		t.Fatalf("%d records stored, want %d", len(recs), rounds*ids+2)
	}
	for i, r := range recs[:rounds*ids] {
		if string(r.Payload) != payload(i) {
			t.Fatalf("record %d is %s", i, r.Payload)
		}
	}
}

// mapMeta is a MetaScanner over a map (for the decoder's fuzz target).
type mapMeta map[string][]byte

func (m mapMeta) ScanMeta(prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out, nil
}

// FuzzDedupJournal: whatever the stored bytes, reading a client's dedup
// entries never panics, every key is read or declared dead once, and a
// known packet id's hash comes from its newest record.
func FuzzDedupJournal(f *testing.F) {
	h := dedup.HashMessage("t", []byte("x"))
	f.Add(dedup.JournalRecord(7, h), dedup.Encode(h), uint16(7), []byte{dedup.JournalVersion, 0})
	f.Add([]byte{}, []byte{1}, uint16(0), slices.Concat(dedup.JournalRecord(1, h), dedup.JournalRecord(1, dedup.Hash{})))
	f.Fuzz(func(t *testing.T, j1, old []byte, pid uint16, j2 []byte) {
		const prefix = "mqttl/c/"
		journal := prefix + "j/"
		key := func(seq uint64) string { return journal + string(binary.BigEndian.AppendUint64(nil, seq)) }
		m := mapMeta{key(1): j1, key(2): j2, prefix + strconv.Itoa(int(pid)): old, prefix + "x": old, "mqttl/d/j/": j1}
		known, dead, _, err := dedup.ReadJournal(m, prefix, journal)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range dead {
			if !strings.HasPrefix(k, prefix) || k == prefix+"x" {
				t.Fatalf("dead key %q is not one of the client's entries", k)
			}
		}
		// The newest record of each id (j2's after j1's) wins.
		newest := map[uint16]dedup.Hash{}
		for _, v := range [][]byte{j1, j2} {
			for ; len(v) >= dedup.JournalLen && v[0] == dedup.JournalVersion; v = v[dedup.JournalLen:] {
				var h dedup.Hash
				copy(h[:], v[3:dedup.JournalLen])
				newest[uint16(v[1])<<8|uint16(v[2])] = h
			}
		}
		for p, h := range newest {
			if known[p] != h {
				t.Fatalf("packet id %d: known %x, newest record %x", p, known[p], h)
			}
		}
	})
}
