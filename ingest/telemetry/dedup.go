package telemetry

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/edge-agent/edge-agent/localstream"
)

// The broker client's dedup records are a journal, as the listener's are
// (dedup_session.go): the records of the messages that one store commit
// holds are one metadata entry (localstream.WithJournal), so a message
// costs 19 bytes in its commit's entry rather than a Badger entry of its
// own (a WAL entry and a memtable insert per message):
//
//	key:    "mqtt/<client id>/j/<sequence, u64 BE>"
//	value:  n × [version 1][packet id u16 BE][sha256(topic 0x00 payload)[:16]]
//
// The newest record of a packet id is its entry. A message delivered with
// DUP set whose packet id and hash equal it is a redelivery of a message
// already appended (the agent crashed or the link dropped between the
// append and the PUBACK): it is acked, not stored. Run loads the newest
// record of every packet id into a table; stores written before the
// journal hold one key per packet id, "mqtt/<client id>/<packet id,
// decimal>" → [version 1][hash 16] (dedupKey, encodeDedup), read as older
// than any journal entry. Entries whose every record is superseded are
// deleted (Ingester.collectDedup) when Run starts and every dedupGCEvery
// messages, off the dispatcher goroutine, so at most one entry per packet
// id is kept.

const (
	dedupVersion = 1
	dedupLen     = 1 + 16
	// DedupPrefix is the metadata key prefix of the dedup entries.
	DedupPrefix = "mqtt/"
)

// msgHash identifies a message's content.
type msgHash [16]byte

func hashMessage(topic string, payload []byte) msgHash {
	h := sha256.New()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(payload)
	var sum [sha256.Size]byte // Sum appends: no allocation per message
	var out msgHash
	copy(out[:], h.Sum(sum[:0]))
	return out
}

func dedupKey(client string, pid uint16) string {
	return DedupPrefix + client + "/" + strconv.Itoa(int(pid))
}

func encodeDedup(h msgHash) []byte {
	b := make([]byte, dedupLen)
	b[0] = dedupVersion
	copy(b[1:], h[:])
	return b
}

func decodeDedup(b []byte) (msgHash, error) {
	var h msgHash
	if len(b) != dedupLen {
		return h, fmt.Errorf("%w: %d bytes, want %d", ErrCorruptDedup, len(b), dedupLen)
	}
	if b[0] != dedupVersion {
		return h, fmt.Errorf("%w: version %d", ErrCorruptDedup, b[0])
	}
	copy(h[:], b[1:])
	return h, nil
}

// dedupEntry is the last message appended with one packet id.
type dedupEntry struct {
	// hash of the message; valid says the entry is set.
	hash  msgHash
	valid bool
	// pending: its append is queued but not yet durable.
	pending bool
	// waiters are acks of redeliveries to send once it is durable.
	waiters []func()
}

// dedupTable mirrors the stored entries of one client id, plus the appends
// still in flight. Safe for concurrent use.
type dedupTable struct {
	mu      sync.Mutex
	entries [1 << 16]dedupEntry
}

// load fills the table with the newest stored hash of each packet id.
func (t *dedupTable) load(known map[uint16]msgHash) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid, h := range known {
		t.entries[pid] = dedupEntry{hash: h, valid: true}
	}
}

// check decides for a DUP message: duplicate reports whether it is a
// redelivery of the entry. If that entry is still pending, ack is queued
// to run when it becomes durable and deferred is true; otherwise the caller
// acks at once.
func (t *dedupTable) check(pid uint16, h msgHash, ack func()) (duplicate, deferred bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &t.entries[pid]
	if !e.valid || e.hash != h {
		return false, false
	}
	if e.pending {
		e.waiters = append(e.waiters, ack)
		return true, true
	}
	return true, false
}

// begin records an append of (pid, h) about to be queued. Acks waiting on
// an older append of pid still pending move to this one (see
// sessionDedup.begin).
func (t *dedupTable) begin(pid uint16, h msgHash) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w []func()
	if e := &t.entries[pid]; e.pending {
		w = e.waiters
	}
	t.entries[pid] = dedupEntry{hash: h, valid: true, pending: true, waiters: w}
}

// done marks the append of (pid, h) durable and returns the waiting acks.
func (t *dedupTable) done(pid uint16, h msgHash) []func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &t.entries[pid]
	if !e.valid || e.hash != h {
		return nil
	}
	w := e.waiters
	e.pending, e.waiters = false, nil
	return w
}

// dedupSource keeps the dedup entries of one MQTT session: the broker
// client's (brokerDedup) or a listener client's (sessionDedup). check runs
// on the dispatcher goroutine; begin before the append, done after it
// (on the store's callback goroutine): implementations are safe for
// concurrent use.
type dedupSource interface {
	// check decides for a DUP message (see dedupTable.check).
	check(pid uint16, h msgHash, ack func()) (duplicate, deferred bool)
	// begin records an append of (pid, h) about to be queued.
	begin(pid uint16, h msgHash)
	// done marks the append of (pid, h) finished — stored, or not — and
	// returns the waiting acks.
	done(pid uint16, h msgHash, stored bool) []func()
	// option writes pid's entry with the append.
	option(pid uint16, h msgHash) localstream.AppendOption
}

// brokerDedup is the broker client's session: one client id, its entries
// loaded at start into a table of every packet id.
type brokerDedup struct {
	table *dedupTable
	meta  metaDeleter
	// prefix is "mqtt/<client id>/"; journal is prefix + "j/".
	prefix, journal string
	// written counts begins; every dedupGCEvery of them gcDue (capacity
	// 1) asks Run's collector for a collection.
	written atomic.Uint64
	gcDue   chan struct{}
}

func newBrokerDedup(meta metaDeleter, client string) *brokerDedup {
	prefix := DedupPrefix + client + "/"
	return &brokerDedup{table: new(dedupTable), meta: meta, prefix: prefix, journal: prefix + "j/", gcDue: make(chan struct{}, 1)}
}

func (b *brokerDedup) check(pid uint16, h msgHash, ack func()) (bool, bool) {
	return b.table.check(pid, h, ack)
}

func (b *brokerDedup) begin(pid uint16, h msgHash) {
	b.table.begin(pid, h)
	if b.written.Add(1)%uint64(dedupGCEvery) == 0 {
		select {
		case b.gcDue <- struct{}{}:
		default: // one is pending
		}
	}
}

func (b *brokerDedup) done(pid uint16, h msgHash, _ bool) []func() { return b.table.done(pid, h) }

func (b *brokerDedup) option(pid uint16, h msgHash) localstream.AppendOption {
	return localstream.WithJournal(b.journal, journalRecord(pid, h))
}
