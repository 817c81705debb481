package dedup

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/edge-agent/edge-agent/localstream"
)

// The broker client's dedup records are a journal, as the listener's are
// (session.go): the records of the messages that one store commit
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
// decimal>" → [version 1][hash 16] (Key, Encode), read as older
// than any journal entry. Entries whose every record is superseded are
// deleted (the telemetry package's Ingester.collectDedup) when Run starts and every GCEvery
// messages, off the dispatcher goroutine, so at most one entry per packet
// id is kept.

const (
	// EntryVersion is the version byte of a key-per-packet-id entry;
	// JournalVersion (session.go) that of a journal record.
	EntryVersion = 1
	entryLen     = 1 + 16
	// BrokerPrefix is the metadata key prefix of the broker client's dedup
	// entries.
	BrokerPrefix = "mqtt/"
)

// ErrCorrupt: a stored dedup entry cannot be decoded.
var ErrCorrupt = errors.New("telemetry: corrupt dedup entry")

// Hash identifies a message's content.
type Hash [16]byte

func HashMessage(topic string, payload []byte) Hash {
	h := sha256.New()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(payload)
	var sum [sha256.Size]byte // Sum appends: no allocation per message
	var out Hash
	copy(out[:], h.Sum(sum[:0]))
	return out
}

func Key(client string, pid uint16) string {
	return BrokerPrefix + client + "/" + strconv.Itoa(int(pid))
}

func Encode(h Hash) []byte {
	b := make([]byte, entryLen)
	b[0] = EntryVersion
	copy(b[1:], h[:])
	return b
}

func Decode(b []byte) (Hash, error) {
	var h Hash
	if len(b) != entryLen {
		return h, fmt.Errorf("%w: %d bytes, want %d", ErrCorrupt, len(b), entryLen)
	}
	if b[0] != EntryVersion {
		return h, fmt.Errorf("%w: version %d", ErrCorrupt, b[0])
	}
	copy(h[:], b[1:])
	return h, nil
}

// Entry is the last message appended with one packet id.
type Entry struct {
	// hash of the message; valid says the entry is set.
	hash  Hash
	valid bool
	// pending: its append is queued but not yet durable.
	pending bool
	// waiters are acks of redeliveries to send once it is durable.
	waiters []func()
}

// Table mirrors the stored entries of one client id, plus the appends
// still in flight. Safe for concurrent use.
type Table struct {
	mu      sync.Mutex
	entries [1 << 16]Entry
}

// load fills the table with the newest stored hash of each packet id.
func (t *Table) Load(known map[uint16]Hash) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid, h := range known {
		t.entries[pid] = Entry{hash: h, valid: true}
	}
}

// check decides for a DUP message: duplicate reports whether it is a
// redelivery of the entry. If that entry is still pending, ack is queued
// to run when it becomes durable and deferred is true; otherwise the caller
// acks at once.
func (t *Table) Check(pid uint16, h Hash, ack func()) (duplicate, deferred bool) {
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
// Session.begin).
func (t *Table) Begin(pid uint16, h Hash) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w []func()
	if e := &t.entries[pid]; e.pending {
		w = e.waiters
	}
	t.entries[pid] = Entry{hash: h, valid: true, pending: true, waiters: w}
}

// done marks the append of (pid, h) durable and returns the waiting acks.
func (t *Table) Done(pid uint16, h Hash) []func() {
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

// Source keeps the dedup entries of one MQTT session: the broker
// client's (brokerDedup) or a listener client's (Session). check runs
// on the dispatcher goroutine; begin before the append, done after it
// (on the store's callback goroutine): implementations are safe for
// concurrent use.
type Source interface {
	// check decides for a DUP message (see Table.check).
	Check(pid uint16, h Hash, ack func()) (duplicate, deferred bool)
	// begin records an append of (pid, h) about to be queued.
	Begin(pid uint16, h Hash)
	// done marks the append of (pid, h) finished — stored, or not — and
	// returns the waiting acks.
	Done(pid uint16, h Hash, stored bool) []func()
	// option writes pid's entry with the append.
	Option(pid uint16, h Hash) localstream.AppendOption
}
