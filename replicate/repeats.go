package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/edge-agent/edge-agent/localstream"
)

// Repeats of a lost state's events (issue 29).
//
// An intake that acknowledges a message only once it is durable (MQTT
// QoS 1: the PUBACK after the fsync) keeps a dedup record of it in the
// store, so that the sender's redelivery of a message whose PUBACK was
// lost is not stored twice. When the store is lost — its directory
// removed or replaced, a tail lost to a power cut, a backup restored —
// its dedup records go with it, and a redelivery of a message that the
// lost state had stored AND sent to the centre is stored again, marked as
// a redelivery no record matched (RepeatFunc: marked, with the identity
// of its content). Only the centre still knows the first copy.
//
// So a resume decision that rebases (this station's replaced store, this
// store's lost tail or restored past: ResumeRebase) reads back the
// identities of the agent's last committed events at the centre — at
// most RepeatWindow of them, newest first — before anything is sent under
// the new base, and keeps them in the store (the seed). While the set
// lasts, an event marked as a redelivery whose identity the set holds for
// its routing key is not sent: its first copy is at the centre. Its
// position is left out of the transaction (a hole in its segment's
// offsets, which the central format allows: holes are where the agent
// shed or lost events), the commit's cut covers it, it is counted
// (StreamStats.RepeatsDropped) and the set's entry is consumed (one per
// copy at the centre).
//
// Why RepeatWindow bounds the read: a sender redelivers only messages it
// never had an acknowledgement for, and one MQTT session has at most
// 65,535 of them (packet ids are 16 bits, 0 excluded; Mosquitto holds
// max_inflight_messages, 1000 recommended). Acknowledgements go in
// delivery order, so those are the session's last deliveries: the ones the
// lost state sent are among the agent's last committed events.
//
// The set ends (nothing more is dropped):
//   - for a routing key, at its first event with an identity that is not
//     marked: a session resends its unacknowledged messages first, in
//     order, at its reconnect, so a fresh delivery of the key means its
//     redeliveries are over — a later marked event of the key is a first
//     copy (its store stopped before it was durable), and content equal to
//     an older event of the centre's tail must not drop it;
//   - after RepeatWindow events with an identity, all keys together.
//
// Both errs only towards sending: a redelivery not matched is sent,
// marked, as before (a consumer may still drop it). Nothing is dropped
// that the centre does not hold.
//
// Determinism across restarts and SIGKILLs: what is dropped is a
// function of the seed and of the store's events after the seed's cut, in
// each routing key's order (a key lives in one segment at a time, and
// successors are read after their predecessors), never of timing. A new
// process replays the events from the seed's cut to the centre's cut
// (no more than the set's lifetime: it is deleted when it ends) to find
// the state there; within a process each acked commit keeps the state at
// its cut. A store whose retention deleted events after the seed's cut,
// a centre that lost its tail (a resend), or a later rebase ends the set
// (a decision of its own seeds again): then marked repeats are sent.

// RepeatFunc describes an event for the repeats of a lost state: id is
// the identity of its content (the one its intake marks redeliveries
// with); ok is false for an event without one (it is never redelivered:
// video, MAVLink, gap markers); marked reports that its intake stored it
// as a redelivery that no dedup record matched. It must be safe for
// concurrent use and a pure function of the record.
type RepeatFunc func(rec *localstream.Record) (id string, marked, ok bool)

// repeatSet is the identities of the centre's tail, per routing key, with
// the copies of each at the centre. Its keys map is shared with the
// snapshots taken of it (copied before a change, see own).
type repeatSet struct {
	// Keys maps a routing key to the identities of its events in the
	// centre's tail and the copies of each.
	Keys map[string]map[string]int `json:"keys"`
	// Left counts the events with an identity still to see before the
	// set ends.
	Left int `json:"left"`
	// owned: Keys may be changed in place (no snapshot shares it).
	owned bool
}

// ended reports whether the set drops nothing more.
func (s *repeatSet) ended() bool { return s == nil || s.Left <= 0 || len(s.Keys) == 0 }

// snapshot returns a copy for a commit's cut; both then copy Keys before
// a change.
func (s *repeatSet) snapshot() *repeatSet {
	if s == nil {
		return nil
	}
	s.owned = false
	c := *s
	return &c
}

// own makes Keys this set's own before a change.
func (s *repeatSet) own() {
	if s.owned {
		return
	}
	keys := make(map[string]map[string]int, len(s.Keys))
	for k, ids := range s.Keys {
		keys[k] = maps.Clone(ids)
	}
	s.Keys, s.owned = keys, true
}

// drop applies the rule to the next event of its routing key in stream
// order and reports whether it is a repeat not to send.
func (s *repeatSet) drop(repeat RepeatFunc, rec *localstream.Record) bool {
	if s.ended() || repeat == nil {
		return false
	}
	id, marked, ok := repeat(rec)
	if !ok {
		return false
	}
	s.Left--
	ids := s.Keys[rec.RoutingKey]
	switch {
	case ids == nil:
		return false
	case !marked:
		// A fresh delivery of the key: its redeliveries are over.
		s.own()
		delete(s.Keys, rec.RoutingKey)
		return false
	case ids[id] == 0:
		return false
	}
	s.own()
	ids = s.Keys[rec.RoutingKey]
	if ids[id]--; ids[id] == 0 {
		delete(ids, id)
	}
	if len(ids) == 0 {
		delete(s.Keys, rec.RoutingKey)
	}
	return true
}

// repeatSeed is the set as read from the centre at a rebase, kept in the
// store (sync/<sink>/<stream>/repeats) until it ends.
type repeatSeed struct {
	// From is the local cut the rebase sends after, Base its epoch base.
	From localstream.StreamCut `json:"from"`
	Base uint32                `json:"base"`
	// Seq is the central record the rebase was decided against.
	Seq uint64    `json:"seq"`
	Set repeatSet `json:"set"`
}

// repeatReadFactor bounds the events a rebase reads back from the centre:
// this many times RepeatWindow, those without an identity included.
const repeatReadFactor = 8

// tailReader is a sink that reads back the agent's committed events.
type tailReader interface {
	// ReadTail calls fn with the agent's committed events of stream (no
	// markers) at or before stream sequence upTo, newest first, until fn
	// returns false or none is left.
	ReadTail(ctx context.Context, stream string, upTo uint64, fn func(rec *localstream.Record) bool) error
}

// seedRepeats reads the identities of the centre's tail before a rebase
// decided against c, and keeps them with the decision's cut and base
// before anything is sent under it. Only a rebase that continues this
// store's or this station's chain seeds: another station's messages were
// never this intake's to redeliver.
func (r *Replicator) seedRepeats(ctx context.Context, c Committed, act ResumeAction) error {
	if err := r.dropRepeats(); err != nil {
		return err
	}
	tr, ok := r.sink.(tailReader)
	same := c.Record.Store == r.store || c.Record.Station != "" && c.Record.Station == r.cfg.Station
	if r.cfg.Repeat == nil || !ok || c.Seq == 0 || !same {
		return nil
	}
	set := repeatSet{Keys: map[string]map[string]int{}, Left: r.cfg.RepeatWindow}
	n, total := 0, 0
	err := tr.ReadTail(ctx, r.st.Name(), c.Seq, func(rec *localstream.Record) bool {
		// Events without an identity (MAVLink frames beside MQTT
		// telemetry) are read past, within a bound.
		if total++; total > repeatReadFactor*r.cfg.RepeatWindow {
			return false
		}
		id, _, ok := r.cfg.Repeat(rec)
		if !ok {
			return true
		}
		ids := set.Keys[rec.RoutingKey]
		if ids == nil {
			ids = map[string]int{}
			set.Keys[rec.RoutingKey] = ids
		}
		ids[id]++
		n++
		return n < r.cfg.RepeatWindow
	})
	if err != nil {
		return fmt.Errorf("replicate: read the centre's tail for repeats: %w", err)
	}
	r.repeatsKnown.Store(uint64(n))
	if n == 0 {
		return nil
	}
	b, err := json.Marshal(repeatSeed{From: act.From, Base: act.Base, Seq: c.Seq, Set: set})
	if err != nil {
		return err
	}
	if err := r.st.Store().PutMeta(r.metaKey("repeats"), b); err != nil {
		return fmt.Errorf("replicate: keep repeats: %w", err)
	}
	set.owned = true
	r.repeats = &set
	r.cfg.Logger.Info("read back the centre's tail: a redelivery of one of its events is not sent again",
		"stream", r.st.Name(), "identities", n, "keys", len(set.Keys), "central_seq", c.Seq)
	return nil
}

// dropRepeats ends the set and forgets the seed.
func (r *Replicator) dropRepeats() error {
	r.repeats, r.repeatsCommitted = nil, nil
	if err := r.st.Store().DeleteMeta(r.metaKey("repeats")); err != nil && !errors.Is(err, localstream.ErrFailed) {
		return fmt.Errorf("replicate: clear repeats: %w", err)
	}
	return nil
}

// loadRepeats makes the set current at from, the cut a run sends after
// under base: the state kept at this process's last commit when it is at
// from, else the seed's replayed over the store's events up to from. A
// seed that cannot be brought there (another base, a cut not before from,
// events after it deleted) ends.
func (r *Replicator) loadRepeats(from localstream.StreamCut, base uint32) error {
	if r.cfg.Repeat == nil {
		return nil
	}
	if r.repeatsCommitted != nil && r.repeatsCommittedAt.Equal(from) && r.repeatsCommittedBase == base {
		r.repeats = r.repeatsCommitted.snapshot()
		return nil
	}
	r.repeats = nil
	v, ok, err := r.st.Store().GetMeta(r.metaKey("repeats"))
	if err != nil || !ok {
		return err
	}
	var seed repeatSeed
	if err := json.Unmarshal(v, &seed); err != nil {
		r.cfg.Logger.Warn("repeats: seed unreadable; marked redeliveries are sent", "stream", r.st.Name(), "err", err)
		return r.dropRepeats()
	}
	set := seed.Set
	set.owned = true
	if seed.Base != base {
		return r.dropRepeats()
	}
	if !seed.From.Equal(from) {
		if err := r.replayRepeats(&set, seed.From, from); err != nil {
			r.cfg.Logger.Warn("repeats: cannot replay the store's events since the rebase; marked redeliveries are sent",
				"stream", r.st.Name(), "from", seed.From.String(), "to", from.String(), "err", err)
			return r.dropRepeats()
		}
	}
	if set.ended() {
		return r.dropRepeats()
	}
	r.repeats = &set
	return nil
}

// replayRepeats applies the rule to the store's events from seed to to,
// which the centre has (the state at to, not sending anything).
func (r *Replicator) replayRepeats(set *repeatSet, seed, to localstream.StreamCut) error {
	topo := r.st.Topology()
	if err := topo.Validate(seed); err != nil {
		return err
	}
	if le, err := topo.LessEq(r.st.HeadCut(), seed); err != nil || !le {
		return fmt.Errorf("events after the seed's cut were deleted (head %s)", r.st.HeadCut())
	}
	rd, err := r.st.NewReader(seed, &to)
	if err != nil {
		return err
	}
	defer rd.Close()
	for !set.ended() {
		rec, err := rd.TryNext()
		if errors.Is(err, localstream.ErrEndOfCut) {
			return nil
		}
		if err != nil {
			return err
		}
		set.drop(r.cfg.Repeat, &rec)
	}
	return nil
}

// repeatsCommit books the set's state at an acked commit's cut, and
// forgets the seed once the set ended.
func (r *Replicator) repeatsCommit(fl *inflight) error {
	r.repeatsDropped.Add(uint64(fl.repeatsDropped))
	if fl.repeats == nil {
		return nil
	}
	r.repeatsCommitted, r.repeatsCommittedAt, r.repeatsCommittedBase = fl.repeats, fl.cut, fl.meta.EpochBase
	if !fl.repeats.ended() {
		return nil
	}
	r.repeatsCommitted = nil
	if err := r.st.Store().DeleteMeta(r.metaKey("repeats")); err != nil && !errors.Is(err, localstream.ErrFailed) {
		return fmt.Errorf("replicate: clear repeats: %w", err)
	}
	return nil
}
