package replicate

import (
	"fmt"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// Resume decision: a deterministic core (no I/O, time as input) that the
// replicator runs on every central read, and the property test runs over
// a model of JetStream.
//
// # One chain per store identity
//
// An agent's commit records on a stream form one chain (each expects the
// sequence of the one before). Every record names the store whose events
// it holds and the station (the machine, MachineStation) it ran on.
// Kafka's idempotent producers are the anchor: a producer id with an
// epoch, bumped by whoever takes over the id, and the broker refuses the
// old epoch from then on; a producer is never fenced because it was
// quiet. Here the store identity is the producer, the chain's expected
// sequence is the broker's check, and a takeover is a commit by another
// store. Who may write after the chain's last record is decided by what
// the stores and stations are, never by how long the last writer was
// silent: a station's uplink may be down for any length of time.
//
//   - This store's record, written by one of its own runs: continue (a
//     late commit of a dead predecessor of this run is adopted once).
//   - This store's identity, a run it never had, on this station: the
//     store was restored from a backup taken before its later runs. It
//     continues as its own past: from what it recovered, under a new
//     epoch base, with a gap marker from the chain's cut for what the
//     later runs captured and never sent.
//   - This store's identity, a run it never had, on another station (or
//     an unknown one): a copy of this store (a cloned card) is, or was,
//     live elsewhere. Refused (ErrTwin) until an operator takes over
//     (--takeover).
//   - Another store of this station: the station's disk was replaced or
//     its directory wiped. Taken over at once, unattended.
//   - Another store of another station (or an unknown one), or a record
//     written before store identities (no store; unknown station) that
//     this store did not write: a second station with the same agent id.
//     Refused loudly (ErrTwin, naming both) until an operator acts
//     (--takeover). A store that existed before identities (its local
//     record of the committed cut was written by a version that noted no
//     run) takes a record without a store for its own: it is the store
//     that wrote it, upgraded in place. It keeps knowing so across
//     restarts until its first commit under its identity lands.
//   - A store that took over writes from a new epoch base: every position
//     it sends is beyond every position the centre has seen. The old
//     store, if it is live, finds a foreign record in its chain and stops
//     (ErrFenced, naming both identities).
//
// A cloned image carries the machine id with it (systemd's images must
// leave /etc/machine-id empty so that each machine makes its own): two
// stations of one image are one station here, so the later one takes the
// chain over and the earlier one is fenced, loudly, never both writing.
//
// # Positions are never reused
//
// Central segment id = local segment id + EpochBase<<32 (the record's
// epoch_base). A store that lost data (a wiped directory, a tail lost to a
// power cut in periodic durability) resumes under a base beyond every
// epoch of the chain's last record: the offsets it assigns again land in
// epochs the centre has never seen. The loss is a LostRange in the next
// commit record (its start exact: the last commit's cut), a counter, a log
// line and a /status error.
//
// # The centre lost its tail
//
// When the centre's last record is behind what this store committed, the
// store sends again from there what it still retains, and reports what
// retention deleted as a LostRange with both ends exact.

// ResumeKind is what a replicator does after reading the centre.
type ResumeKind int

const (
	// ResumeContinue: send the events after From under Base.
	ResumeContinue ResumeKind = iota + 1
	// ResumeResend: the centre is behind the local committed cut; record
	// From as the committed cut (back), then send after it.
	ResumeResend
	// ResumeRebase: lost data or a taken-over chain; record From as the
	// committed cut and send after it under the new Base, with Lost in
	// the first commit record.
	ResumeRebase
	// ResumeRefuse: another writer (another station, a copy of this
	// store) owns the chain, or took it over; stop (Err names both
	// identities) until an operator acts.
	ResumeRefuse
)

func (k ResumeKind) String() string {
	switch k {
	case ResumeContinue:
		return "continue"
	case ResumeResend:
		return "resend"
	case ResumeRebase:
		return "rebase"
	case ResumeRefuse:
		return "refuse"
	}
	return "unknown"
}

// ResumeInput is everything the decision depends on.
type ResumeInput struct {
	// Stream names the local stream (for messages).
	Stream string
	// Store is the local store identity; Instance this run's id;
	// KnownInstance reports whether an instance id is one of this
	// store's runs (this one included).
	Store, Instance string
	KnownInstance   func(string) bool
	// Station is this station's identity (ReplicatorConfig.Station; "":
	// unknown, never the same as a record's).
	Station string
	// Takeover is the operator's order to take over whatever chain is
	// there (at the first read of a run, and while the chain's last
	// record is still the one read then).
	Takeover bool
	// Base is the local epoch base in use.
	Base uint32
	// Topo, Head and Recovered describe the local stream: its segments,
	// its first retained position, and its tail when the store was opened.
	Topo      localstream.Topology
	Head      localstream.StreamCut
	Recovered localstream.StreamCut
	// RecoveredAfter returns the lowest tail found at the Opens that came
	// after the Open of the run instance (for a run not kept, the lowest
	// of all kept): offsets after it may have been assigned again since
	// that run committed. false: no Open after it (Recovered holds).
	RecoveredAfter func(instance string) (localstream.StreamCut, bool)
	// Committed is what this store knows it committed (the latest of this
	// run's commits and the local record), in local positions; nil: none.
	Committed *localstream.StreamCut
	// RecordedAtOpen is the local record of the committed cut as the
	// store was opened (nil: none), even when it no longer fits: beyond
	// the recovered tail, it proves that the store lost a tail it had
	// committed (the centre may have lost it since too).
	RecordedAtOpen *localstream.StreamCut
	// RecordedBy is the run that wrote it ("": unknown).
	RecordedBy string
	// PreIdentity: this store wrote the chain's records from before store
	// identities and has committed none under its identity since. It is
	// what RecordedAtOpen with no RecordedBy showed at the store's first
	// Open by a version with identities, kept by the store so that it
	// still holds once a run of that version noted itself as recorder.
	PreIdentity bool
	// Last is the chain's last record at the centre (Seq 0: none).
	Last Committed
	// Started is set after the first read of this run; StartSeq is the
	// sequence read then; KnownSeq the latest commit this run knew (read
	// or made); OwnCommits counts this run's commits; Adopted counts
	// predecessors' late commits adopted by this run.
	Started             bool
	StartSeq, KnownSeq  uint64
	OwnCommits, Adopted int
	// Decided is set once this run applied a decision (Refuse is none):
	// until then, what the store found at Open still counts.
	Decided bool
	// Now is the clock (for FoundAtNs).
	Now time.Time
}

// ResumeAction is the decision.
type ResumeAction struct {
	Kind ResumeKind
	// From is the local cut to send after (Continue, Resend, Rebase).
	From localstream.StreamCut
	// Base is the epoch base to send under.
	Base uint32
	// Lost is the gap to report in the next commit record (nil: none).
	Lost *wire.LostRange
	// Adopt: Last is a late commit of this store's dead predecessor.
	Adopt bool
	// Err explains Refuse.
	Err error
}

// Decide is the resume decision. It never returns a From that skips an
// event this store holds and the centre does not, and never a Base under
// which a position the centre holds could be sent again.
func Decide(in ResumeInput) ResumeAction {
	last := in.Last
	if last.Seq == 0 {
		return in.decideEmpty()
	}
	rec := last.Record
	mine := rec.Instance == in.Instance
	// A record without a store is this store's only when this store
	// wrote records before identities too.
	legacy := rec.Store == "" && in.legacyStore()
	own := rec.Store != "" && rec.Store == in.Store || legacy
	known := mine || legacy || in.KnownInstance != nil && in.KnownInstance(rec.Instance)
	station := in.Station != "" && rec.Station == in.Station
	// A record written since this run started, by someone else. A chain
	// that went back (the centre lost its tail) is not someone else's
	// activity: its last record is one this run has seen pass.
	newSinceStart := in.Started && last.Seq != in.StartSeq && last.Seq > in.KnownSeq
	takeover := in.Takeover && (!in.Started || last.Seq == in.StartSeq)
	switch {
	case newSinceStart && !mine && own && !known && station && in.OwnCommits == 0:
		// A late commit of a run this store had before the backup it was
		// restored from, landed before this run committed: still its past.
		return in.rebaseFrom(in.Recovered)
	case newSinceStart && !mine && !own && station && in.OwnCommits == 0:
		// A late commit of this station's replaced store (its process
		// died with a commit in flight), landed before this run
		// committed: take over from it.
		return in.takeover(wire.LossStoreReplaced)
	case newSinceStart && !mine && !(own && known):
		if own {
			return ResumeAction{Kind: ResumeRefuse, Err: fmt.Errorf("%w: stream %s: commit seq %d of this store %s by run %s (station %s), which this store never ran: a copy of this store is live; stop one, or restart this one with --takeover",
				ErrTwin, in.Stream, last.Seq, rec.Store, rec.Instance, stationName(rec.Station))}
		}
		return ResumeAction{Kind: ResumeRefuse, Err: fmt.Errorf("%w: stream %s: %s took over agent %s's chain (seq %d, instance %s); this store %s (station %s) stopped replicating and keeps capturing locally",
			ErrFenced, in.Stream, writerName(rec), rec.Agent, last.Seq, rec.Instance, in.Store, stationName(in.Station))}
	case !own:
		if takeover || station {
			// The operator's order, or this station's replaced disk.
			return in.takeover(wire.LossStoreReplaced)
		}
		if rec.Store == "" {
			return ResumeAction{Kind: ResumeRefuse, Err: fmt.Errorf("%w: stream %s: agent %s's chain was last written before store identities (seq %d, instance %s), and this store %s (station %s) holds no sign that it wrote it: another station uses this agent id, or this station's store was replaced before its upgrade; stop the other, or restart this one with --takeover",
				ErrTwin, in.Stream, rec.Agent, last.Seq, rec.Instance, in.Store, stationName(in.Station))}
		}
		return ResumeAction{Kind: ResumeRefuse, Err: fmt.Errorf("%w: stream %s: agent %s's chain was last written by %s (seq %d, instance %s); this store %s is of station %s: another station uses this agent id; stop one, or restart this one with --takeover",
			ErrTwin, in.Stream, rec.Agent, writerName(rec), last.Seq, rec.Instance, in.Store, stationName(in.Station))}
	case !known:
		switch {
		case takeover:
			return in.takeover(wire.LossStoreReplaced)
		case station:
			// This store restored from a backup taken before its later
			// runs: it continues as its own past.
			return in.rebaseFrom(in.Recovered)
		}
		return ResumeAction{Kind: ResumeRefuse, Err: fmt.Errorf("%w: stream %s: commit seq %d of store %s by run %s on station %s, which this store never ran on station %s: a copy of this store (cloned disk) is live elsewhere; stop one, or restart this one with --takeover",
			ErrTwin, in.Stream, last.Seq, rec.Store, rec.Instance, stationName(rec.Station), stationName(in.Station))}
	case newSinceStart && !mine:
		// A commit of our dead predecessor may still land late, once,
		// before this run committed; anything more is another process.
		if in.OwnCommits > 0 || in.Adopted > 0 {
			return ResumeAction{Kind: ResumeRefuse, Err: fmt.Errorf("%w: stream %s: commit %d (txn %d) by instance %s of this store %s", ErrFenced, in.Stream, last.Seq, rec.Txn, rec.Instance, in.Store)}
		}
		a := in.decideOwn()
		a.Adopt = a.Kind == ResumeContinue
		return a
	}
	return in.decideOwn()
}

// legacyStore reports whether this store wrote commit records before
// store identities: its local record of the committed cut, as it was
// opened, was written by a version that noted no run as its recorder —
// or was at an earlier Open, and the store kept that (PreIdentity).
func (in ResumeInput) legacyStore() bool {
	return in.PreIdentity || in.RecordedAtOpen != nil && in.RecordedBy == ""
}

// writerName names a record's store and station for messages.
func writerName(rec wire.CommitRecord) string {
	if rec.Store == "" {
		return "a store before store identities (station unknown)"
	}
	return "store " + rec.Store + " of station " + stationName(rec.Station)
}

func stationName(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// decideEmpty: the centre holds nothing of this agent.
func (in ResumeInput) decideEmpty() ResumeAction {
	start := initialCut(in.Topo)
	if in.lostRecorded() {
		// Everything under the old base that is not at the centre is in
		// the gap; what is retained goes again under a new one.
		return ResumeAction{Kind: ResumeRebase, From: in.Head, Base: in.newBase(localstream.StreamCut{}),
			Lost: &wire.LostRange{Reason: wire.LossLocalTail, Store: in.Store, From: toCentral(start, in.Base).Map(), FoundAtNs: in.Now.UnixNano()}}
	}
	if in.Committed == nil {
		return ResumeAction{Kind: ResumeContinue, From: in.Head, Base: in.Base}
	}
	// The centre lost every commit (a new or restored stream): send again
	// whatever is retained.
	a := ResumeAction{Kind: ResumeResend, From: in.Head, Base: in.Base}
	if le, err := in.Topo.LessEq(in.Head, start); err != nil || !le {
		a.Lost = &wire.LostRange{Reason: wire.LossCentralTail, Store: in.Store, From: toCentral(start, in.Base).Map(),
			To: toCentral(in.Head, in.Base).Map(), FoundAtNs: in.Now.UnixNano()}
	}
	return a
}

// decideOwn: the chain's last record is this store's.
func (in ResumeInput) decideOwn() ResumeAction {
	last := in.Last
	central, err := last.Record.StreamCut()
	if err != nil {
		return in.rebaseLostTail()
	}
	cut, ok := toLocal(central, last.Record.EpochBase)
	if !ok || in.Topo.Validate(cut) != nil {
		return in.rebaseLostTail()
	}
	if last.Record.Instance != in.Instance {
		// A record of an earlier run covers events of the store as it was
		// then; one beyond the lowest tail an Open found since may cover
		// offsets lost and assigned again.
		if le, err := in.Topo.LessEq(cut, in.floor(last.Record.Instance)); err != nil || !le {
			return in.rebaseLostTail()
		}
	}
	if in.lostRecorded() {
		// The store lost a tail it had committed, and the centre is not
		// beyond what it recovered: the centre lost it too. What the
		// store retains after the centre's cut goes again, under a new
		// base; the rest of the old base after that cut is the gap.
		return ResumeAction{Kind: ResumeRebase, From: cut, Base: in.newBase(central),
			Lost: &wire.LostRange{Reason: wire.LossLocalTail, Store: in.Store, From: last.Record.Cut,
				CentralSeq: last.Seq, FoundAtNs: in.Now.UnixNano()}}
	}
	base := max(in.Base, last.Record.EpochBase)
	if in.Committed != nil {
		if le, err := in.Topo.LessEq(*in.Committed, cut); err != nil || !le {
			return in.resend(cut, base)
		}
	}
	return ResumeAction{Kind: ResumeContinue, From: cut, Base: base}
}

// resend: the centre's cut is behind what this store committed.
func (in ResumeInput) resend(cut localstream.StreamCut, base uint32) ResumeAction {
	from, err := in.Topo.Join(cut, in.Head)
	if err != nil {
		from = in.Head
	}
	a := ResumeAction{Kind: ResumeResend, From: from, Base: base}
	if !from.Equal(cut) {
		a.Lost = &wire.LostRange{Reason: wire.LossCentralTail, Store: in.Store,
			From: toCentral(cut, base).Map(), To: toCentral(from, base).Map(),
			CentralSeq: in.Last.Seq, FoundAtNs: in.Now.UnixNano()}
	}
	return a
}

// rebaseLostTail: the centre holds positions of this store beyond what it
// recovered. The events of this store before the centre's cut are there;
// those it had after it are lost (end unknown). Offsets after the
// recovered tail will be assigned again, so a new base.
func (in ResumeInput) rebaseLostTail() ResumeAction {
	return in.rebaseFrom(in.floor(in.Last.Record.Instance))
}

// rebaseFrom is rebaseLostTail with floor, the tail below which this
// store's offsets are those the chain's last record saw: for a store
// restored from a backup, the tail it recovered (its later runs
// continued from the backup's state).
func (in ResumeInput) rebaseFrom(floor localstream.StreamCut) ResumeAction {
	central, _ := in.Last.Record.StreamCut()
	cut, _ := toLocal(central, in.Last.Record.EpochBase)
	return ResumeAction{
		Kind: ResumeRebase,
		From: meetRecovered(in.Topo, cut, floor, in.Head),
		Base: in.newBase(central),
		Lost: &wire.LostRange{Reason: wire.LossLocalTail, Store: in.Store, From: in.Last.Record.Cut,
			CentralSeq: in.Last.Seq, FoundAtNs: in.Now.UnixNano()},
	}
}

// floor is the tail below which the store's offsets are those it had
// when the run instance wrote: the lowest tail an Open found since.
func (in ResumeInput) floor(instance string) localstream.StreamCut {
	if instance != "" && in.RecoveredAfter != nil {
		if c, ok := in.RecoveredAfter(instance); ok && in.Topo.Validate(c) == nil {
			return c
		}
	}
	return in.Recovered
}

// lostRecorded reports whether the local record of the committed cut, as
// the store was opened, is beyond what the store recovered: it lost a
// tail that it had committed. Only a run's first decision asks.
func (in ResumeInput) lostRecorded() bool {
	if in.Decided || in.RecordedAtOpen == nil {
		return false
	}
	rec := *in.RecordedAtOpen
	if in.Topo.Validate(rec) != nil {
		return true
	}
	le, err := in.Topo.LessEq(rec, in.floor(in.RecordedBy))
	return err != nil || !le
}

// newBase is an epoch base beyond every central epoch this store knows of:
// the chain's last cut, and its own segments (and recorded cut) under the
// base in use. Local epochs start at 0, so every position sent under it is
// new to the centre.
func (in ResumeInput) newBase(central localstream.StreamCut) uint32 {
	local := uint32(0)
	for id := range in.Topo.Segments {
		local = max(local, id.Epoch())
	}
	if in.RecordedAtOpen != nil {
		local = max(local, maxEpoch(*in.RecordedAtOpen))
	}
	return max(in.Base+local+1, maxEpoch(central)+1)
}

// takeover continues another store's chain: this store's events after
// what it committed itself (nothing: its head), under a base beyond every
// epoch of the chain; the other store's events after its last commit are
// lost.
func (in ResumeInput) takeover(reason wire.LossReason) ResumeAction {
	central, _ := in.Last.Record.StreamCut()
	from := in.Head
	if in.Committed != nil {
		if j, err := in.Topo.Join(*in.Committed, in.Head); err == nil {
			from = j
		}
	}
	store := in.Last.Record.Store
	return ResumeAction{
		Kind: ResumeRebase, From: from,
		Base: max(in.newBase(central), in.Last.Record.EpochBase+1),
		Lost: &wire.LostRange{Reason: reason, Store: store, From: in.Last.Record.Cut,
			CentralSeq: in.Last.Seq, FoundAtNs: in.Now.UnixNano()},
	}
}

// meetRecovered is the resume cut after a lost tail: for every key range
// the earlier of the centre's position (cut, possibly beyond the local
// topology) and the recovered tail. Segments of cut unknown locally are
// successors the local store lost: their ranges resume at the recovered
// tail. When the pieces do not form a cut, the recovered tail (joined with
// the head) is the answer: it never skips an event appended since Open.
func meetRecovered(topo localstream.Topology, cut, recovered, head localstream.StreamCut) localstream.StreamCut {
	fallback := recovered
	if j, err := topo.Join(recovered, head); err == nil {
		fallback = j
	}
	out := localstream.StreamCut{Stream: topo.Stream, Positions: map[localstream.SegmentID]uint64{}}
	var covered []localstream.KeyRange
	for id, off := range cut.Positions {
		s, ok := topo.Segments[id]
		if !ok {
			continue
		}
		if r, in := recovered.Positions[id]; in {
			off = min(off, r)
		} else if off > s.Length {
			off = s.Length
		}
		out.Positions[id] = off
		covered = append(covered, s.Range)
	}
	for id, off := range recovered.Positions {
		r := topo.Segments[id].Range
		overlap := false
		for _, c := range covered {
			overlap = overlap || c.Overlaps(r)
		}
		if !overlap {
			out.Positions[id] = off
		}
	}
	if topo.Validate(out) != nil {
		return fallback
	}
	if le, err := topo.LessEq(out, recovered); err != nil || !le {
		return fallback
	}
	if j, err := topo.Join(out, head); err == nil {
		return j
	}
	return fallback
}

// initialCut is the start of the stream: its first segments at offset 0.
func initialCut(topo localstream.Topology) localstream.StreamCut {
	c := localstream.StreamCut{Stream: topo.Stream, Positions: map[localstream.SegmentID]uint64{}}
	for id, s := range topo.Segments {
		if len(s.Predecessors) == 0 {
			c.Positions[id] = 0
		}
	}
	return c
}

// shift is a local segment id in central positions under base.
func shift(id localstream.SegmentID, base uint32) localstream.SegmentID {
	return localstream.NewSegmentID(id.Epoch()+base, id.Number())
}

// toCentral maps a local cut to central positions under base.
func toCentral(c localstream.StreamCut, base uint32) localstream.StreamCut {
	if base == 0 || c.Positions == nil {
		return c
	}
	out := localstream.StreamCut{Stream: c.Stream, Positions: make(map[localstream.SegmentID]uint64, len(c.Positions))}
	for id, off := range c.Positions {
		out.Positions[shift(id, base)] = off
	}
	return out
}

// toLocal maps a central cut written under base back to local positions;
// false when a segment's epoch is below base (not this base's).
func toLocal(c localstream.StreamCut, base uint32) (localstream.StreamCut, bool) {
	if base == 0 || c.Positions == nil {
		return c, true
	}
	out := localstream.StreamCut{Stream: c.Stream, Positions: make(map[localstream.SegmentID]uint64, len(c.Positions))}
	for id, off := range c.Positions {
		if id.Epoch() < base {
			return localstream.StreamCut{}, false
		}
		out.Positions[localstream.NewSegmentID(id.Epoch()-base, id.Number())] = off
	}
	return out, true
}

// maxEpoch is the highest epoch in a cut.
func maxEpoch(c localstream.StreamCut) uint32 {
	var e uint32
	for id := range c.Positions {
		e = max(e, id.Epoch())
	}
	return e
}

// monotoneWatermark makes a commit's watermark at least its chain
// predecessor's: a commit that landed late (after a smaller transaction
// was rebuilt) can rewind the tracker, but never the chain. prev's cut is
// in central positions under prevBase; wm is local. Times take the later
// value; the cut joins prev's when it is this store's under the same base
// (prev's watermark cut is inside prev's cut, which is inside this
// commit's), else keeps wm's.
func monotoneWatermark(topo localstream.Topology, wm watermark.Watermark, prev wire.CommitRecord, store string, base uint32) watermark.Watermark {
	if prev.Txn == 0 {
		return wm
	}
	out := watermark.Watermark{LowerNs: max(wm.LowerNs, prev.Watermark.LowerNs), UpperNs: max(wm.UpperNs, prev.Watermark.UpperNs), Cut: wm.Cut}
	if (prev.Store != "" && prev.Store != store) || prev.EpochBase != base || len(prev.Watermark.Cut) == 0 {
		return out
	}
	pc, err := prev.Watermark.Cut.Cut(prev.Stream)
	if err != nil {
		return out
	}
	pl, ok := toLocal(pc, base)
	if !ok {
		return out
	}
	if wm.Cut.Positions == nil {
		if topo.Validate(pl) == nil {
			out.Cut = pl
		}
		return out
	}
	if j, err := topo.Join(wm.Cut, pl); err == nil {
		out.Cut = j
	}
	return out
}
