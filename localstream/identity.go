package localstream

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// storeIDKey is the metadata key of the store identity.
const storeIDKey = "store/id"

// ensureID reads the store identity, or makes one (random, 16 hex digits)
// when the store has none: a new directory, or a store written before
// identities existed. It is fsync'd in every durability mode, so that a
// store never runs under an identity it then forgets.
func (s *Store) ensureID() error {
	v, ok, err := s.GetMeta(storeIDKey)
	if err != nil {
		return fmt.Errorf("localstream: read store identity: %w", err)
	}
	s.openID = randomID()
	if ok && len(v) > 0 {
		s.id = string(v)
		return nil
	}
	id := randomID()
	if err := s.update(func(txn *badger.Txn) error { return txn.Set(metaKey(storeIDKey), []byte(id)) }); err != nil {
		return fmt.Errorf("localstream: write store identity: %w", err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("localstream: write store identity: %w", err)
	}
	s.id = id
	return nil
}

// randomID is 16 random hex digits.
func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// OpenID identifies this Open of the store: random, new at every Open.
// Runs that see the same OpenID saw the same recovered tail and nothing
// lost in between. Safe for concurrent use.
func (s *Store) OpenID() string { return s.openID }

// ID returns the store identity: random, made when the store was created
// and kept in it. A wiped or replaced data directory gets a new one; a
// copied directory keeps it. Safe for concurrent use.
func (s *Store) ID() string { return s.id }

// Sync forces every write so far to disk (PutMeta values included, in
// DurabilityPeriodic mode too).
func (s *Store) Sync() error {
	if err := s.Err(); err != nil {
		return err
	}
	return s.db.Sync()
}

// Store returns the store the stream belongs to.
func (st *Stream) Store() *Store { return st.s }

// RecoveredTail returns the cut after the last event found when the store
// was opened (for a stream created since, its start). Events after it were
// appended by this process. After a crash that lost a tail (DurabilityPeriodic),
// offsets after it may be assigned again; the replicator uses this cut to
// tell the events of this run from those the centre holds.
func (st *Stream) RecoveredTail() StreamCut {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.recovered.Clone()
}

// ResetCommittedCut records c as sink's committed cut even when it is
// before the one recorded (SetCommittedCut refuses that): the sink lost
// what it had committed after c and will receive it again, so retention
// must keep it. c must fit the stream.
func (st *Stream) ResetCommittedCut(sink string, c StreamCut) error {
	if sink == "" {
		return fmt.Errorf("localstream: empty sink name")
	}
	if err := st.Topology().Validate(c); err != nil {
		return err
	}
	if err := st.s.Err(); err != nil {
		return err
	}
	b, _ := c.MarshalBinary()
	if err := st.s.update(func(txn *badger.Txn) error { return txn.Set(cutKey(st.name, sink), b) }); err != nil {
		return err
	}
	return st.s.db.Sync()
}
