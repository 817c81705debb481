package dedup

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
// of appends in flight are held (Pending, at most the lanes' and the
// store queue's messages); a DUP whose original is not in flight is looked
// up in the client's known entries, read from the store at the session's
// first such DUP (clients resend only right after they reconnect) and
// dropped again after SnapshotIdle messages without a DUP. Disk stays
// bounded: an entry whose every record has a newer one for its packet id
// is deleted (GC, at each persistent CONNECT and every
// GCEvery messages of a session), so at most 65,536 records per
// client are kept, as with a key per packet id. A clean-session CONNECT
// deletes the client's entries; a clean session writes none (its client
// never resends after a reconnect).

// ListenerPrefix is the metadata key prefix of the listener clients'
// dedup entries.
const ListenerPrefix = "mqttl/"

// ListenPrefix is the key prefix of one client's entries.
func ListenPrefix(client string) string {
	return ListenerPrefix + url.PathEscape(client) + "/"
}

// pendingKey names one client's packet id.
type pendingKey struct {
	client string
	pid    uint16
}

// Pending holds the entries of the listener's appends in flight, for
// every client. Safe for concurrent use.
type Pending struct {
	mu sync.Mutex
	m  map[pendingKey]*Entry
}

// NewPending returns the listener's table of appends in flight.
func NewPending() *Pending { return &Pending{m: map[pendingKey]*Entry{}} }

// NewSession returns client's persistent session. lookupError reports a
// store read that failed.
func NewSession(p *Pending, meta SessionMeta, client string, lookupError func(error)) *Session {
	prefix := ListenPrefix(client)
	return &Session{pending: p, meta: meta, client: client, prefix: prefix, journal: prefix + "j/", lookupError: lookupError}
}

// Collect deletes the session's dead entries (GC).
func (s *Session) Collect() (int, error) { return GC(s.meta, s.prefix, s.journal) }

// GCDue reports (once) that GCEvery messages came since the last
// collection.
func (s *Session) GCDue() bool { return s.gcDue.Swap(false) }

// Session is one listener client's persistent session.
type Session struct {
	pending *Pending
	meta    SessionMeta
	client  string
	// prefix is ListenPrefix(client); journal is prefix + "j/".
	prefix, journal string
	// lookupError reports a store read that failed (the message is then
	// stored: at worst a duplicate, never a loss).
	lookupError func(error)
	// gcDue asks the connection to run GC between two packets.
	gcDue atomic.Bool

	mu sync.Mutex
	// known is the newest stored entry of each packet id (nil until a DUP
	// needed the store); done keeps it current.
	known map[uint16]Hash
	// sinceDup counts messages since the last DUP that read known; written
	// counts messages since the last GC.
	sinceDup, written int
}

const (
	JournalVersion = 1
	JournalLen     = 1 + 2 + 16
)

// SnapshotIdle: known is dropped after this many messages without a
// DUP; GCEvery: a session's journal is collected after this many
// messages. Variables for tests.
var (
	SnapshotIdle = 4096
	GCEvery      = 1 << 16
)

// JournalRecord is the journal record of (pid, h).
func JournalRecord(pid uint16, h Hash) []byte {
	b := make([]byte, JournalLen)
	b[0] = JournalVersion
	b[1], b[2] = byte(pid>>8), byte(pid)
	copy(b[3:], h[:])
	return b
}

func (s *Session) Option(pid uint16, h Hash) localstream.AppendOption {
	return localstream.WithJournal(s.journal, JournalRecord(pid, h))
}

// check: a DUP message is a redelivery if the entry of its packet id in
// flight, or else the newest stored one, has its hash.
func (s *Session) Check(pid uint16, h Hash, ack func()) (bool, bool) {
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
		known, _, _, err := ReadJournal(s.meta, s.prefix, s.journal)
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
// back every later ack of its connection (mqttwire.AckOrder).
func (s *Session) Begin(pid uint16, h Hash) {
	s.pending.mu.Lock()
	k := pendingKey{s.client, pid}
	e := &Entry{hash: h, valid: true, pending: true}
	if old := s.pending.m[k]; old != nil {
		e.waiters = old.waiters
	}
	s.pending.m[k] = e
	s.pending.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sinceDup++; s.sinceDup > SnapshotIdle {
		s.known = nil
	}
	if s.written++; s.written >= GCEvery {
		s.written = 0
		s.gcDue.Store(true)
	}
}

func (s *Session) Done(pid uint16, h Hash, stored bool) []func() {
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

// ReadJournal reads one client's stored entries (a listener
// client's or the broker client's): the newest hash of each packet id,
// the keys whose every record is superseded by a newer one (dead), and
// how many records or values do not decode (corrupt: they catch no
// resend, and a corrupt key is dead once superseded). Keys of one packet
// id each (before the journal) are older than every journal entry; other
// keys under prefix (another client's, whose id extends this one) are
// left alone.
func ReadJournal(meta MetaScanner, prefix, journal string) (known map[uint16]Hash, dead []string, corrupt int, err error) {
	return ScanJournal(meta, prefix, journal, true)
}

// ScanJournal is ReadJournal; without withKnown it returns no
// known map (GC needs only the dead keys: the map of up to 65,536
// hashes was built and dropped at every collection).
func ScanJournal(meta MetaScanner, prefix, journal string, withKnown bool) (known map[uint16]Hash, dead []string, corrupt int, err error) {
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
			for ; len(v) >= JournalLen && v[0] == JournalVersion; v = v[JournalLen:] {
				e.pids = append(e.pids, uint16(v[1])<<8|uint16(v[2]))
			}
			corrupt += (len(v) + JournalLen - 1) / JournalLen // the rest does not decode
			entries = append(entries, e)
			continue
		}
		pid, err := strconv.ParseUint(k[len(prefix):], 10, 16)
		if err != nil {
			continue // not an entry of this client
		}
		if _, err := Decode(v); err != nil {
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
		known = map[uint16]Hash{}
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
				if h, err := Decode(v); err == nil {
					known[pid] = h
				}
				continue
			}
			var h Hash
			copy(h[:], v[j*JournalLen+3:(j+1)*JournalLen])
			known[pid] = h // later records of one pid in one entry win
		}
		if !live {
			dead = append(dead, e.key)
		}
	}
	return known, dead, corrupt, nil
}

// MetaDeleter is what collecting dedup entries needs of the store;
// satisfied by *localstream.Store.
type MetaDeleter interface {
	MetaScanner
	DeleteMetaKeys(keys []string) (int, error)
}

// GC deletes one client's dead entries (see ReadJournal).
func GC(meta MetaDeleter, prefix, journal string) (int, error) {
	_, dead, _, err := ScanJournal(meta, prefix, journal, false)
	if err != nil {
		return 0, err
	}
	return meta.DeleteMetaKeys(dead)
}

// MetaScanner reads back the dedup entries; satisfied by
// *localstream.Store.
type MetaScanner interface {
	ScanMeta(prefix string) (map[string][]byte, error)
}

// SessionMeta is what a listener client's session needs of the store;
// satisfied by *localstream.Store.
type SessionMeta interface {
	MetaScanner
	// GetMeta reads one key.
	GetMeta(key string) ([]byte, bool, error)
	// DeleteMetaPrefix deletes every key starting with prefix.
	DeleteMetaPrefix(prefix string) (int, error)
	// DeleteMetaKeys deletes keys in few transactions.
	DeleteMetaKeys(keys []string) (int, error)
}
