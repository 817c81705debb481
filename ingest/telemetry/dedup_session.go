package telemetry

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/edge-agent/edge-agent/localstream"
)

// The listener's publishers (drones) are many clients, each with its own
// packet ids. A persistent session's dedup records are a journal per
// client (localstream.WithJournal): the records of the client's messages
// that one store commit holds are one metadata entry, so a message costs
// 19 bytes in an entry of its commit rather than a Badger entry of its own
// (a WAL entry and a memtable insert per message). The client
// id is path-escaped so that one client's prefix is never another's ("a"
// and "a/b"):
//
//	key:    "mqttl/<url.PathEscape(client id)>/j/<sequence, u64 BE>"
//	value:  n × [version 1][packet id u16 BE][sha256(topic 0x00 payload)[:16]]
//
// The newest record of a packet id is its entry: a DUP message whose id
// and hash equal it was stored before (a resend after a reconnect or an
// agent crash) and is acked, not stored again. Stores written before the
// journal hold one key per packet id, "mqttl/<client>/<packet id,
// decimal>" → [version 1][hash]; they are read as older than any journal
// entry and deleted once superseded.
//
// Memory stays bounded however many client ids come and go: the entries
// of appends in flight are held (pendingDedup, at most the lanes' and the
// store queue's messages); a DUP whose original is not in flight is looked
// up in the client's known entries, read from the store at the session's
// first such DUP (clients resend only right after they reconnect) and
// dropped again after dedupSnapshotIdle messages without a DUP. Disk stays
// bounded: an entry whose every record has a newer one for its packet id
// is deleted (dedupGC, at each persistent CONNECT and every
// dedupGCEvery messages of a session), so at most 65,536 records per
// client are kept, as with a key per packet id. A clean-session CONNECT
// deletes the client's entries; a clean session writes none (its client
// never resends after a reconnect).

// ListenDedupPrefix is the metadata key prefix of the listener clients'
// dedup entries.
const ListenDedupPrefix = "mqttl/"

// listenDedupPrefix is the key prefix of one client's entries.
func listenDedupPrefix(client string) string {
	return ListenDedupPrefix + url.PathEscape(client) + "/"
}

// pendingKey names one client's packet id.
type pendingKey struct {
	client string
	pid    uint16
}

// pendingDedup holds the entries of the listener's appends in flight, for
// every client. Safe for concurrent use.
type pendingDedup struct {
	mu sync.Mutex
	m  map[pendingKey]*dedupEntry
}

// sessionDedup is one listener client's persistent session.
type sessionDedup struct {
	pending *pendingDedup
	meta    SessionMeta
	client  string
	// prefix is listenDedupPrefix(client); journal is prefix + "j/".
	prefix, journal string
	// lookupError reports a store read that failed (the message is then
	// stored: at worst a duplicate, never a loss).
	lookupError func(error)
	// gcDue asks the connection to run dedupGC between two packets.
	gcDue atomic.Bool

	mu sync.Mutex
	// known is the newest stored entry of each packet id (nil until a DUP
	// needed the store); done keeps it current.
	known map[uint16]msgHash
	// sinceDup counts messages since the last DUP that read known; written
	// counts messages since the last GC.
	sinceDup, written int
}

const (
	journalVersion = 1
	journalLen     = 1 + 2 + 16
)

// dedupSnapshotIdle: known is dropped after this many messages without a
// DUP; dedupGCEvery: a session's journal is collected after this many
// messages. Variables for tests.
var (
	dedupSnapshotIdle = 4096
	dedupGCEvery      = 1 << 16
)

// journalRecord is the journal record of (pid, h).
func journalRecord(pid uint16, h msgHash) []byte {
	b := make([]byte, journalLen)
	b[0] = journalVersion
	b[1], b[2] = byte(pid>>8), byte(pid)
	copy(b[3:], h[:])
	return b
}

func (s *sessionDedup) option(pid uint16, h msgHash) localstream.AppendOption {
	return localstream.WithJournal(s.journal, journalRecord(pid, h))
}

// check: a DUP message is a redelivery if the entry of its packet id in
// flight, or else the newest stored one, has its hash.
func (s *sessionDedup) check(pid uint16, h msgHash, ack func()) (bool, bool) {
	k := pendingKey{s.client, pid}
	s.pending.mu.Lock()
	if e := s.pending.m[k]; e != nil {
		defer s.pending.mu.Unlock()
		if e.hash != h {
			return false, false // a newer message under this id is in flight
		}
		e.waiters = append(e.waiters, ack)
		return true, true
	}
	s.pending.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinceDup = 0
	if s.known == nil {
		known, _, _, err := readDedupJournal(s.meta, s.prefix, s.journal)
		if err != nil {
			s.lookupError(err)
			return false, false
		}
		s.known = known
	}
	stored, ok := s.known[pid]
	return ok && stored == h, false
}

// begin: a client that reuses a packet id still in flight (a protocol
// error, or a hostile client) replaces its entry; the acks waiting on the
// older append move to the newer one, which becomes durable after it
// (appends complete in order): late, never lost — a lost ack would hold
// back every later ack of its connection (ackOrder).
func (s *sessionDedup) begin(pid uint16, h msgHash) {
	s.pending.mu.Lock()
	k := pendingKey{s.client, pid}
	e := &dedupEntry{hash: h, valid: true, pending: true}
	if old := s.pending.m[k]; old != nil {
		e.waiters = old.waiters
	}
	s.pending.m[k] = e
	s.pending.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sinceDup++; s.sinceDup > dedupSnapshotIdle {
		s.known = nil
	}
	if s.written++; s.written >= dedupGCEvery {
		s.written = 0
		s.gcDue.Store(true)
	}
}

func (s *sessionDedup) done(pid uint16, h msgHash, stored bool) []func() {
	if stored {
		s.mu.Lock()
		if s.known != nil {
			s.known[pid] = h
		}
		s.mu.Unlock()
	}
	k := pendingKey{s.client, pid}
	s.pending.mu.Lock()
	defer s.pending.mu.Unlock()
	e := s.pending.m[k]
	if e == nil || e.hash != h {
		return nil
	}
	delete(s.pending.m, k)
	return e.waiters
}

// readDedupJournal reads one client's stored entries (a listener
// client's or the broker client's): the newest hash of each packet id,
// the keys whose every record is superseded by a newer one (dead), and
// how many records or values do not decode (corrupt: they catch no
// resend, and a corrupt key is dead once superseded). Keys of one packet
// id each (before the journal) are older than every journal entry; other
// keys under prefix (another client's, whose id extends this one) are
// left alone.
func readDedupJournal(meta MetaScanner, prefix, journal string) (known map[uint16]msgHash, dead []string, corrupt int, err error) {
	return scanDedupJournal(meta, prefix, journal, true)
}

// scanDedupJournal is readDedupJournal; without withKnown it returns no
// known map (dedupGC needs only the dead keys: the map of up to 65,536
// hashes was built and dropped at every collection).
func scanDedupJournal(meta MetaScanner, prefix, journal string, withKnown bool) (known map[uint16]msgHash, dead []string, corrupt int, err error) {
	m, err := meta.ScanMeta(prefix)
	if err != nil {
		return nil, nil, 0, err
	}
	type entry struct {
		key  string
		pids []uint16
	}
	var old, entries []entry
	for k, v := range m {
		if _, ok := localstream.JournalSeq(journal, k); ok {
			e := entry{key: k}
			for ; len(v) >= journalLen && v[0] == journalVersion; v = v[journalLen:] {
				e.pids = append(e.pids, uint16(v[1])<<8|uint16(v[2]))
			}
			corrupt += (len(v) + journalLen - 1) / journalLen // the rest does not decode
			entries = append(entries, e)
			continue
		}
		pid, err := strconv.ParseUint(k[len(prefix):], 10, 16)
		if err != nil {
			continue // not an entry of this client
		}
		if _, err := decodeDedup(v); err != nil {
			corrupt++
		}
		old = append(old, entry{key: k, pids: []uint16{uint16(pid)}})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	all := slices.Concat(old, entries)
	var newest [1 << 16]int32 // pid → 1 + the index in all of its newest record's entry
	for i, e := range all {
		for _, pid := range e.pids {
			newest[pid] = int32(i + 1)
		}
	}
	if withKnown {
		known = map[uint16]msgHash{}
	}
	for i, e := range all {
		live := false
		v := m[e.key]
		for j, pid := range e.pids {
			if newest[pid] != int32(i+1) {
				continue
			}
			live = true
			if !withKnown {
				break
			}
			if i < len(old) {
				if h, err := decodeDedup(v); err == nil {
					known[pid] = h
				}
				continue
			}
			var h msgHash
			copy(h[:], v[j*journalLen+3:(j+1)*journalLen])
			known[pid] = h // later records of one pid in one entry win
		}
		if !live {
			dead = append(dead, e.key)
		}
	}
	return known, dead, corrupt, nil
}

// metaDeleter is what collecting dedup entries needs of the store;
// satisfied by *localstream.Store.
type metaDeleter interface {
	MetaScanner
	DeleteMetaKeys(keys []string) (int, error)
}

// dedupGC deletes one client's dead entries (see readDedupJournal).
func dedupGC(meta metaDeleter, prefix, journal string) (int, error) {
	_, dead, _, err := scanDedupJournal(meta, prefix, journal, false)
	if err != nil {
		return 0, err
	}
	return meta.DeleteMetaKeys(dead)
}
