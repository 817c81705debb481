package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// The replicator's side of the resume decision (resume.go): it gathers
// the inputs from the local store and the run, and applies the action.
//
// Kept in the local store (fsync'd before anything depends on them):
//
//	sync/instance/<instance>          a run of this store (its commits are its own)
//	sync/<sink>/<stream>/base         the epoch base in use (decimal)
//	sync/<sink>/<stream>/resume       a decided rebase or resend whose first
//	                                  commit has not landed yet (JSON pendingResume)
//	sync/<sink>/<stream>/opens        the last 64 Opens: run instance and the tail
//	                                  it recovered (JSON): a record of a run is
//	                                  checked against the lowest tail found since
//	                                  (its commit may land late, or come back when
//	                                  the centre loses its tail, after a lost local
//	                                  tail let offsets be assigned again)
//	sync/<sink>/<stream>/recorder     the run that last wrote the local record of the
//	                                  committed cut or the high-water mark
//	sync/<sink>/<stream>/high         after a resend moved the local record back:
//	                                  what had been committed (binary cut), until
//	                                  the chain passes it again
//
// A decided rebase is kept until its first commit lands: deciding again
// after a crash would see the offsets assigned since as recovered ones.

// pendingResume is a decision waiting for its first commit.
type pendingResume struct {
	// Seq is the central record it was decided against; Txn and Instance
	// are that record's (absent in decisions kept before them): a
	// sequence alone may name another record by now (a centre restored
	// from an older copy reuses sequences, a store restored from a
	// backup finds a decision of long ago).
	Seq      uint64     `json:"seq"`
	Txn      uint64     `json:"txn,omitempty"`
	Instance string     `json:"instance,omitempty"`
	Kind     ResumeKind `json:"kind"`
	// From is the local cut to send after (text form).
	From localstream.StreamCut `json:"from"`
	Base uint32                `json:"base"`
	Lost *wire.LostRange       `json:"lost,omitempty"`
}

// matches reports whether the decision was made against c.
func (p pendingResume) matches(c Committed) bool {
	return p.Seq == c.Seq && (p.Txn == 0 || p.Txn == c.Record.Txn && p.Instance == c.Record.Instance)
}

func (r *Replicator) metaKey(what string) string {
	return "sync/" + r.cfg.SinkName + "/" + r.st.Name() + "/" + what
}

func instanceKey(instance string) string { return "sync/instance/" + instance }

// load reads the epoch base and notes this run's instance as the store's,
// durably, before the run's first commit.
func (r *Replicator) load() error {
	if r.loaded {
		return nil
	}
	s := r.st.Store()
	v, ok, err := s.GetMeta(r.metaKey("base"))
	if err != nil {
		return fmt.Errorf("replicate: read epoch base: %w", err)
	}
	if ok {
		b, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return fmt.Errorf("%w: epoch base %q", wire.ErrCorruptRecord, v)
		}
		r.base = uint32(b)
	}
	if c, ok, err := r.st.CommittedCut(r.cfg.SinkName); err == nil && ok {
		r.recordedAtOpen = &c
	}
	if v, ok, err := s.GetMeta(r.metaKey("recorder")); err != nil {
		return fmt.Errorf("replicate: read recorder: %w", err)
	} else if ok {
		r.recordedBy = string(v)
	}
	if err := r.loadPreIdentity(); err != nil {
		return err
	}
	if v, ok, err := s.GetMeta(r.metaKey("high")); err != nil {
		return fmt.Errorf("replicate: read committed high-water mark: %w", err)
	} else if ok {
		// A resend moved the record back: what had been committed before
		// is what a lost tail must be compared with.
		var c localstream.StreamCut
		if err := c.UnmarshalBinary(v); err != nil {
			return fmt.Errorf("%w: committed high-water mark: %v", wire.ErrCorruptRecord, err)
		}
		r.high, r.recordedAtOpen = &c, &c
	}
	if err := r.loadOpens(); err != nil {
		return err
	}
	if _, ok, err := s.GetMeta(instanceKey(r.instance)); err != nil || !ok {
		if err := s.PutMeta(instanceKey(r.instance), []byte(strconv.FormatInt(r.cfg.Now().UnixNano(), 10))); err != nil {
			return fmt.Errorf("replicate: note instance: %w", err)
		}
		if err := s.Sync(); err != nil {
			return fmt.Errorf("replicate: note instance: %w", err)
		}
	}
	r.loaded = true
	return nil
}

// openEntry is one Open of the store as a run saw it.
type openEntry struct {
	Instance  string                `json:"instance"`
	Recovered localstream.StreamCut `json:"recovered"`
	// Open is the store's OpenID at the run (absent in entries kept
	// before it existed): runs of one Open lost nothing in between.
	Open string `json:"open,omitempty"`
}

// maxOpens bounds the kept Opens per stream.
const maxOpens = 64

// loadOpens notes this run's Open (the tail it recovered) after the kept
// ones.
func (r *Replicator) loadOpens() error {
	s := r.st.Store()
	r.recovered = r.st.RecoveredTail()
	v, ok, err := s.GetMeta(r.metaKey("opens"))
	if err != nil {
		return fmt.Errorf("replicate: read opens: %w", err)
	}
	r.opens = nil
	if ok {
		if err := json.Unmarshal(v, &r.opens); err != nil {
			return fmt.Errorf("%w: opens: %v", wire.ErrCorruptRecord, err)
		}
	}
	r.opens = append(r.opens, openEntry{Instance: r.instance, Recovered: r.recovered, Open: s.OpenID()})
	if len(r.opens) > maxOpens {
		r.opens = r.opens[len(r.opens)-maxOpens:]
	}
	b, _ := json.Marshal(r.opens)
	if err := s.PutMeta(r.metaKey("opens"), b); err != nil {
		return fmt.Errorf("replicate: keep opens: %w", err)
	}
	return nil
}

// recoveredAfter is ResumeInput.RecoveredAfter over the kept Opens, in
// topo (the topology the decision sees). Only the runs of another Open of
// the store count: a run of the same Open (a replicator restarted in one
// process) saw the same recovered tail, and nothing was lost since; for a
// run of this very Open the bound is topo's tail — not the store's tail
// now, which appends may have moved beyond topo (then it would not fit
// topo, and the recovered tail of the Open would be taken for the bound).
func (r *Replicator) recoveredAfter(topo localstream.Topology, instance string) (localstream.StreamCut, bool) {
	start, open := 0, ""
	for i, o := range r.opens {
		if o.Instance == instance {
			start, open = i+1, o.Open
		}
	}
	var low localstream.StreamCut
	found := false
	for _, o := range r.opens[start:] {
		if open != "" && o.Open == open {
			continue
		}
		if le, err := topo.LessEq(o.Recovered, low); !found || err == nil && le {
			low, found = o.Recovered, true
		}
	}
	if !found && open != "" && open == r.st.Store().OpenID() {
		return topo.TailCut(), true
	}
	return low, found
}

// knownInstance reports whether instance is a run of this store.
func (r *Replicator) knownInstance(instance string) bool {
	_, ok, err := r.st.Store().GetMeta(instanceKey(instance))
	return err == nil && ok
}

// committedLocal is what this store knows it committed, in local
// positions: the later of the last commit known and the local record.
func (r *Replicator) committedLocal(topo localstream.Topology) *localstream.StreamCut {
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	var out *localstream.StreamCut
	if l, ok := r.localCut(last); ok && topo.Validate(l) == nil {
		out = &l
	}
	c, ok, err := r.st.CommittedCut(r.cfg.SinkName)
	if err != nil || !ok || topo.Validate(c) != nil {
		return out
	}
	if out == nil {
		return &c
	}
	// After the centre went back, the last commit known is behind the
	// record: the later of the two is what was committed.
	if j, err := topo.Join(*out, c); err == nil {
		return &j
	}
	return out
}

// resume decides from c, the chain's last record, and returns the local
// cut to send after.
func (r *Replicator) resume(ctx context.Context, c Committed) (localstream.StreamCut, error) {
	if err := r.load(); err != nil {
		return localstream.StreamCut{}, err
	}
	committed := r.committedLocal(r.st.Topology())
	act, fresh, err := r.decide(c)
	if err != nil {
		return localstream.StreamCut{}, err
	}
	if !r.started {
		r.started, r.startSeq = true, c.Seq
	}
	switch act.Kind {
	case ResumeRefuse:
		return localstream.StreamCut{}, act.Err
	case ResumeRebase, ResumeResend:
		if fresh {
			// The centre's tail is read before the decision is kept: a
			// crash in between decides, and reads, again.
			var err error
			if act.Kind == ResumeRebase {
				err = r.seedRepeats(ctx, c, act)
			} else {
				err = r.dropRepeats() // the centre lost commits: its tail proves nothing
			}
			if err != nil {
				return localstream.StreamCut{}, err
			}
			if err := r.keepPending(c, act, committed); err != nil {
				return localstream.StreamCut{}, err
			}
			r.reportLoss(c, act)
		}
		if err := r.noteRecorder(); err != nil {
			return localstream.StreamCut{}, err
		}
		if err := r.st.ResetCommittedCut(r.cfg.SinkName, act.From); err != nil {
			return localstream.StreamCut{}, fmt.Errorf("replicate: record committed cut locally: %w", err)
		}
		r.localDirty = nil
		r.lostNext = act.Lost
		if !fresh && act.Kind == ResumeRebase {
			if err := r.loadRepeats(act.From, act.Base); err != nil {
				return localstream.StreamCut{}, err
			}
		}
	case ResumeContinue:
		if act.Adopt {
			r.foreign++
			r.adopted.Add(1)
		}
		if act.Base != r.base {
			if err := r.putBase(act.Base); err != nil {
				return localstream.StreamCut{}, err
			}
		}
		if c.Seq > 0 {
			if err := r.recordLocally(act.From, true); err != nil {
				return localstream.StreamCut{}, err
			}
			if err := r.passHigh(act.From); err != nil {
				return localstream.StreamCut{}, err
			}
		}
		if err := r.loadRepeats(act.From, act.Base); err != nil {
			return localstream.StreamCut{}, err
		}
	}
	r.base = act.Base
	r.setLast(c)
	r.setSending(act.Base, act.From)
	r.decided = true
	return act.From, nil
}

// decide returns the pending decision for c when there is one (fresh
// false), else Decide's.
func (r *Replicator) decide(c Committed) (ResumeAction, bool, error) {
	topo := r.st.Topology()
	in := ResumeInput{
		Stream: r.st.Name(), Store: r.store, Instance: r.instance, KnownInstance: r.knownInstance, Station: r.cfg.Station,
		Takeover: r.cfg.Takeover, Base: r.base,
		Topo: topo, Head: r.st.HeadCut(), Recovered: r.recovered, RecoveredAfter: func(i string) (localstream.StreamCut, bool) { return r.recoveredAfter(topo, i) },
		Committed: r.committedLocal(topo), RecordedAtOpen: r.recordedAtOpen, RecordedBy: r.recordedBy, PreIdentity: r.preIdentity, Last: c,
		Started: r.started, StartSeq: r.startSeq, KnownSeq: r.lastSeq(), OwnCommits: r.ownCommits, Adopted: r.foreign, Decided: r.decided,
		Now: r.cfg.Now(),
	}
	p, ok, err := r.pendingDecision()
	if err != nil {
		return ResumeAction{}, false, err
	}
	if ok {
		// A kept decision holds while the chain is where it was decided
		// against, unless the store lost what it knew it had committed
		// since (then a new decision must see that).
		if p.matches(c) && topo.Validate(p.From) == nil && !r.lostSince() && !in.lostRecorded() {
			return ResumeAction{Kind: p.Kind, From: p.From, Base: p.Base, Lost: p.Lost}, false, nil
		}
		if err := r.dropPending(); err != nil {
			return ResumeAction{}, false, err
		}
	}
	return Decide(in), true, nil
}

// dropPending forgets the kept decision: the chain moved on (its first
// commit landed) or a new decision replaces it.
func (r *Replicator) dropPending() error {
	r.pendingKept = false
	if err := r.st.Store().DeleteMeta(r.metaKey("resume")); err != nil {
		return fmt.Errorf("replicate: clear pending resume: %w", err)
	}
	return nil
}

// pendingDecision reads the kept decision, if any.
func (r *Replicator) pendingDecision() (pendingResume, bool, error) {
	v, ok, err := r.st.Store().GetMeta(r.metaKey("resume"))
	if err != nil || !ok {
		return pendingResume{}, false, err
	}
	var p pendingResume
	if err := json.Unmarshal(v, &p); err != nil {
		return pendingResume{}, false, fmt.Errorf("%w: pending resume: %v", wire.ErrCorruptRecord, err)
	}
	return p, true, nil
}

// lostSince reports whether the store lost, since a kept decision was
// made, a tail it had committed before it: the decision is stale.
func (r *Replicator) lostSince() bool {
	if r.decided || r.high == nil {
		return false
	}
	topo := r.st.Topology()
	if topo.Validate(*r.high) != nil {
		return true
	}
	floor := r.recovered
	if r.recordedBy != "" && r.recordedBy != r.instance {
		if c, ok := r.recoveredAfter(topo, r.recordedBy); ok && topo.Validate(c) == nil {
			floor = c
		}
	}
	le, err := topo.LessEq(*r.high, floor)
	return err != nil || !le
}

// keepHigh records, before a resend moves the local record back, what
// had been committed (the local record or this run's last commit), unless
// a higher mark is kept. A rebase clears it: nothing under the new base
// was committed.
func (r *Replicator) keepHigh(act ResumeAction, committed *localstream.StreamCut) error {
	s := r.st.Store()
	if act.Kind == ResumeRebase {
		r.high = nil
		return s.DeleteMeta(r.metaKey("high"))
	}
	if committed == nil {
		return nil
	}
	topo := r.st.Topology()
	if le, err := topo.LessEq(*committed, act.From); err == nil && le {
		return nil
	}
	if r.high != nil {
		if le, err := topo.LessEq(*committed, *r.high); err != nil || le {
			return nil
		}
	}
	if err := r.noteRecorder(); err != nil {
		return err
	}
	b, _ := committed.MarshalBinary()
	if err := s.PutMeta(r.metaKey("high"), b); err != nil {
		return fmt.Errorf("replicate: keep committed high-water mark: %w", err)
	}
	c := committed.Clone()
	r.high = &c
	return s.Sync()
}

// passHigh drops the high-water mark once the chain committed past it.
func (r *Replicator) passHigh(cut localstream.StreamCut) error {
	if r.high == nil {
		return nil
	}
	if le, err := r.st.Topology().LessEq(*r.high, cut); err != nil || !le {
		return nil
	}
	r.high = nil
	return r.st.Store().DeleteMeta(r.metaKey("high"))
}

// keepPending records a rebase or resend (and its base) durably before
// anything is sent under it.
func (r *Replicator) keepPending(c Committed, act ResumeAction, committed *localstream.StreamCut) error {
	if err := r.keepHigh(act, committed); err != nil {
		return err
	}
	b, err := json.Marshal(pendingResume{Seq: c.Seq, Txn: c.Record.Txn, Instance: c.Record.Instance, Kind: act.Kind, From: act.From, Base: act.Base, Lost: act.Lost})
	if err != nil {
		return err
	}
	s := r.st.Store()
	if err := s.PutMeta(r.metaKey("resume"), b); err != nil {
		return fmt.Errorf("replicate: keep pending resume: %w", err)
	}
	r.pendingKept = true
	return r.putBase(act.Base)
}

func (r *Replicator) putBase(b uint32) error {
	s := r.st.Store()
	if err := s.PutMeta(r.metaKey("base"), []byte(strconv.FormatUint(uint64(b), 10))); err != nil {
		return fmt.Errorf("replicate: keep epoch base: %w", err)
	}
	if err := s.Sync(); err != nil {
		return fmt.Errorf("replicate: keep epoch base: %w", err)
	}
	return nil
}

// reportLoss counts, logs and shows (Stats.LastLoss, /status) a decided
// rebase or resend, once.
func (r *Replicator) reportLoss(c Committed, act ResumeAction) {
	if act.Kind == ResumeResend {
		r.rewinds.Add(1)
		r.cfg.Logger.Error("the central store lost commits of this stream: sending again what is retained",
			"stream", r.st.Name(), "central_seq", c.Seq, "central_cut", c.Record.CutText, "from", act.From.String())
	}
	if act.Lost == nil {
		return
	}
	r.lost.Add(1)
	msg := act.Lost.String()
	r.mu.Lock()
	r.lastLoss = msg
	r.mu.Unlock()
	r.cfg.Logger.Error("events lost: reported as a gap marker in the next commit record",
		"stream", r.st.Name(), "loss", msg, "store", r.store, "epoch_base", act.Base, "from", act.From.String())
}

// lossDelivered clears the pending decision once a commit after it (the
// first carries its gap marker) landed. Only the commit goroutine calls
// it, while the session waits.
func (r *Replicator) lossDelivered() error {
	r.lostNext = nil
	if !r.pendingKept {
		return nil
	}
	return r.dropPending()
}

// toCentralWatermark maps a watermark's cut to central positions.
func toCentralWatermark(w watermark.Watermark, base uint32) watermark.Watermark {
	w.Cut = toCentral(w.Cut, base)
	return w
}

// localCut is a commit's cut in local positions, when it is this store's.
func (r *Replicator) localCut(c Committed) (localstream.StreamCut, bool) {
	if c.Seq == 0 || c.Record.Store != "" && c.Record.Store != r.store {
		return localstream.StreamCut{}, false
	}
	cut, err := c.Record.StreamCut()
	if err != nil {
		return localstream.StreamCut{}, false
	}
	return toLocal(cut, c.Record.EpochBase)
}

// lastSeq is the sequence of the latest commit this run knew.
func (r *Replicator) lastSeq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last.Seq
}

// loadPreIdentity finds whether this store wrote its chain's records
// from before store identities. The first Open by a version with
// identities sees it as a local record of the committed cut with no
// recorder noted; that run notes itself as the recorder at its first
// read, so the fact is kept apart (meta "preidentity") and holds across
// restarts until the store's first commit under its identity — after
// which a record without a store at the chain's end is a stranger's.
func (r *Replicator) loadPreIdentity() error {
	s := r.st.Store()
	key := r.metaKey("preidentity")
	if _, ok, err := s.GetMeta(key); err != nil {
		return fmt.Errorf("replicate: read pre-identity mark: %w", err)
	} else if ok {
		r.preIdentity = true
		return nil
	}
	if r.recordedAtOpen == nil || r.recordedBy != "" {
		return nil
	}
	if err := s.PutMeta(key, []byte("1")); err != nil {
		return fmt.Errorf("replicate: note pre-identity mark: %w", err)
	}
	r.preIdentity = true
	return nil
}

// dropPreIdentity forgets the pre-identity mark at this store's first
// commit under its identity.
func (r *Replicator) dropPreIdentity() error {
	if !r.preIdentity {
		return nil
	}
	if err := r.st.Store().DeleteMeta(r.metaKey("preidentity")); err != nil {
		return fmt.Errorf("replicate: clear pre-identity mark: %w", err)
	}
	r.preIdentity = false
	return nil
}

// noteRecorder records, once per run and before its first local record
// of a committed cut, that this run writes them (ResumeInput.RecordedBy).
func (r *Replicator) noteRecorder() error {
	if r.recorderNoted {
		return nil
	}
	if err := r.st.Store().PutMeta(r.metaKey("recorder"), []byte(r.instance)); err != nil {
		return fmt.Errorf("replicate: note recorder: %w", err)
	}
	r.recorderNoted = true
	return nil
}
