package telemetry

import (
	"net/url"
	"strconv"
	"sync"
)

// The listener's publishers (drones) are many clients, each with its own
// packet ids. Their dedup entries have the layout of the broker client's
// (dedup.go) under their own prefix, the client id path-escaped so that
// one client's prefix is never another's ("a" and "a/b"):
//
//	key:   "mqttl/<url.PathEscape(client id)>/<packet id, decimal>"
//	value: [version 1][sha256(topic 0x00 payload)[:16]]
//
// Memory stays bounded however many client ids come and go: only the
// entries of appends in flight are held (pendingDedup, at most the lanes'
// and the store queue's messages); a DUP message whose original is not in
// flight is looked up in the store — a DUP is rare (a resend after a
// reconnect), a point read is cheap. A clean-session CONNECT deletes the
// client's entries; a clean session writes none (its client never resends
// after a reconnect).

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
	// prefix is listenDedupPrefix(client).
	prefix string
	// lookupErrors counts store reads that failed (the message is then
	// stored: at worst a duplicate, never a loss).
	lookupErrors func()
}

func (s *sessionDedup) key(pid uint16) string { return s.prefix + strconv.Itoa(int(pid)) }

// check: a DUP message is a redelivery if the entry of its packet id in
// flight, or else in the store, has its hash.
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
	v, ok, err := s.meta.GetMeta(s.key(pid))
	if err != nil {
		s.lookupErrors()
		return false, false
	}
	if !ok {
		return false, false
	}
	stored, err := decodeDedup(v)
	return err == nil && stored == h, false
}

// begin: a client that reuses a packet id still in flight (a protocol
// error, or a hostile client) replaces its entry; the acks waiting on the
// older append move to the newer one, which becomes durable after it
// (appends complete in order): late, never lost — a lost ack would hold
// back every later ack of its connection (ackOrder).
func (s *sessionDedup) begin(pid uint16, h msgHash) {
	s.pending.mu.Lock()
	defer s.pending.mu.Unlock()
	k := pendingKey{s.client, pid}
	e := &dedupEntry{hash: h, valid: true, pending: true}
	if old := s.pending.m[k]; old != nil {
		e.waiters = old.waiters
	}
	s.pending.m[k] = e
}

func (s *sessionDedup) done(pid uint16, h msgHash) []func() {
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
