package telemetry

import (
	"sync/atomic"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/localstream"
)

// The broker client's dedup records are a journal, as the listener's are
// (internal/dedup): the records of the messages that one store commit
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
// decimal>" → [version 1][hash 16] (dedup.Key, dedup.Encode), read as older
// than any journal entry. Entries whose every record is superseded are
// deleted (Ingester.collectDedup) when Run starts and every dedupGCEvery
// messages, off the dispatcher goroutine, so at most one entry per packet
// id is kept.

// DedupPrefix is the metadata key prefix of the broker client's dedup
// entries; ListenDedupPrefix that of the listener clients'.
const (
	DedupPrefix       = dedup.BrokerPrefix
	ListenDedupPrefix = dedup.ListenerPrefix
)

// brokerDedup is the broker client's session: one client id, its entries
// loaded at start into a table of every packet id.
type brokerDedup struct {
	table *dedup.Table
	meta  dedup.MetaDeleter
	// prefix is "mqtt/<client id>/"; journal is prefix + "j/".
	prefix, journal string
	// written counts begins; every dedupGCEvery of them gcDue (capacity
	// 1) asks Run's collector for a collection.
	written atomic.Uint64
	gcDue   chan struct{}
}

func newBrokerDedup(meta dedup.MetaDeleter, client string) *brokerDedup {
	prefix := dedup.BrokerPrefix + client + "/"
	return &brokerDedup{table: new(dedup.Table), meta: meta, prefix: prefix, journal: prefix + "j/", gcDue: make(chan struct{}, 1)}
}

func (b *brokerDedup) Check(pid uint16, h dedup.Hash, ack func()) (bool, bool) {
	return b.table.Check(pid, h, ack)
}

func (b *brokerDedup) Begin(pid uint16, h dedup.Hash) {
	b.table.Begin(pid, h)
	if b.written.Add(1)%uint64(dedup.GCEvery) == 0 {
		select {
		case b.gcDue <- struct{}{}:
		default: // one is pending
		}
	}
}

func (b *brokerDedup) Done(pid uint16, h dedup.Hash, _ bool) []func() { return b.table.Done(pid, h) }

func (b *brokerDedup) Option(pid uint16, h dedup.Hash) localstream.AppendOption {
	return localstream.WithJournal(b.journal, dedup.JournalRecord(pid, h))
}
