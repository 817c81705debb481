package sync

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/edge-agent/edge-agent/localstream"
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
//
// A decided rebase is kept until its first commit lands: deciding again
// after a crash would see the offsets assigned since as recovered ones.

// pendingResume is a decision waiting for its first commit.
type pendingResume struct {
	// Seq is the central record it was decided against.
	Seq  uint64     `json:"seq"`
	Kind ResumeKind `json:"kind"`
	// From is the local cut to send after (text form).
	From localstream.StreamCut `json:"from"`
	Base uint32                `json:"base"`
	Lost *LostRange            `json:"lost,omitempty"`
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
		return fmt.Errorf("sync: read epoch base: %w", err)
	}
	if ok {
		b, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return fmt.Errorf("%w: epoch base %q", ErrCorruptRecord, v)
		}
		r.base = uint32(b)
	}
	if c, ok, err := r.st.CommittedCut(r.cfg.SinkName); err == nil && ok {
		r.recordedAtOpen = &c
	}
	if _, ok, err := s.GetMeta(instanceKey(r.instance)); err != nil || !ok {
		if err := s.PutMeta(instanceKey(r.instance), []byte(strconv.FormatInt(r.cfg.Now().UnixNano(), 10))); err != nil {
			return fmt.Errorf("sync: note instance: %w", err)
		}
		if err := s.Sync(); err != nil {
			return fmt.Errorf("sync: note instance: %w", err)
		}
	}
	r.loaded = true
	return nil
}

// knownInstance reports whether instance is a run of this store.
func (r *Replicator) knownInstance(instance string) bool {
	_, ok, err := r.st.Store().GetMeta(instanceKey(instance))
	return err == nil && ok
}

// committedLocal is what this store knows it committed, in local
// positions: this run's latest commit, or the local record.
func (r *Replicator) committedLocal(topo localstream.Topology) *localstream.StreamCut {
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	if l, ok := r.localCut(last); ok && topo.Validate(l) == nil {
		return &l
	}
	c, ok, err := r.st.CommittedCut(r.cfg.SinkName)
	if err != nil || !ok || topo.Validate(c) != nil {
		return nil
	}
	return &c
}

// resume decides from c, the chain's last record, and returns the local
// cut to send after.
func (r *Replicator) resume(c Committed) (localstream.StreamCut, error) {
	if err := r.load(); err != nil {
		return localstream.StreamCut{}, err
	}
	act, fresh, err := r.decide(c)
	if err != nil {
		return localstream.StreamCut{}, err
	}
	if !r.started {
		r.started, r.startSeq = true, c.Seq
	}
	switch act.Kind {
	case ResumeWait:
		if r.watchSeq == 0 {
			r.watchSeq, r.watchAt = c.Seq, r.cfg.Now()
			r.cfg.Logger.Warn("replication waits before taking over", "stream", r.st.Name(), "err", act.Err)
		}
		return localstream.StreamCut{}, act.Err
	case ResumeRefuse:
		return localstream.StreamCut{}, act.Err
	case ResumeRebase, ResumeResend:
		if fresh {
			if err := r.keepPending(c, act); err != nil {
				return localstream.StreamCut{}, err
			}
			r.reportLoss(c, act)
		}
		if err := r.st.ResetCommittedCut(r.cfg.SinkName, act.From); err != nil {
			return localstream.StreamCut{}, fmt.Errorf("sync: record committed cut locally: %w", err)
		}
		r.localDirty = nil
		r.lostNext = act.Lost
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
		}
	}
	r.base = act.Base
	r.watchSeq = 0
	r.setLast(c)
	return act.From, nil
}

// decide returns the pending decision for c when there is one (fresh
// false), else Decide's.
func (r *Replicator) decide(c Committed) (ResumeAction, bool, error) {
	s := r.st.Store()
	v, ok, err := s.GetMeta(r.metaKey("resume"))
	if err != nil {
		return ResumeAction{}, false, fmt.Errorf("sync: read pending resume: %w", err)
	}
	if ok {
		var p pendingResume
		if err := json.Unmarshal(v, &p); err != nil {
			return ResumeAction{}, false, fmt.Errorf("%w: pending resume: %v", ErrCorruptRecord, err)
		}
		if p.Seq == c.Seq && r.st.Topology().Validate(p.From) == nil {
			return ResumeAction{Kind: p.Kind, From: p.From, Base: p.Base, Lost: p.Lost}, false, nil
		}
		// The chain moved on: the decision's first commit landed (or the
		// centre changed again, and a new decision follows).
		if err := s.DeleteMeta(r.metaKey("resume")); err != nil {
			return ResumeAction{}, false, fmt.Errorf("sync: clear pending resume: %w", err)
		}
	}
	topo := r.st.Topology()
	in := ResumeInput{
		Stream: r.st.Name(), Store: r.store, Instance: r.instance, KnownInstance: r.knownInstance,
		Takeover: r.cfg.Takeover, Base: r.base,
		Topo: topo, Head: r.st.HeadCut(), Recovered: r.st.RecoveredTail(),
		Committed: r.committedLocal(topo), RecordedAtOpen: r.recordedAtOpen, Last: c,
		Started: r.started, StartSeq: r.startSeq, OwnCommits: r.ownCommits, Adopted: r.foreign,
		WatchSeq: r.watchSeq, TakeoverAfter: r.cfg.TakeoverAfter, Now: r.cfg.Now(),
	}
	if r.watchSeq != 0 {
		in.Watched = r.cfg.Now().Sub(r.watchAt)
	}
	return Decide(in), true, nil
}

// keepPending records a rebase or resend (and its base) durably before
// anything is sent under it.
func (r *Replicator) keepPending(c Committed, act ResumeAction) error {
	b, err := json.Marshal(pendingResume{Seq: c.Seq, Kind: act.Kind, From: act.From, Base: act.Base, Lost: act.Lost})
	if err != nil {
		return err
	}
	s := r.st.Store()
	if err := s.PutMeta(r.metaKey("resume"), b); err != nil {
		return fmt.Errorf("sync: keep pending resume: %w", err)
	}
	return r.putBase(act.Base)
}

func (r *Replicator) putBase(b uint32) error {
	s := r.st.Store()
	if err := s.PutMeta(r.metaKey("base"), []byte(strconv.FormatUint(uint64(b), 10))); err != nil {
		return fmt.Errorf("sync: keep epoch base: %w", err)
	}
	if err := s.Sync(); err != nil {
		return fmt.Errorf("sync: keep epoch base: %w", err)
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

// lossDelivered clears the pending decision once the commit carrying its
// gap marker landed. Only the commit goroutine calls it, while the
// session waits.
func (r *Replicator) lossDelivered() error {
	r.lostNext = nil
	if err := r.st.Store().DeleteMeta(r.metaKey("resume")); err != nil {
		return fmt.Errorf("sync: clear pending resume: %w", err)
	}
	return nil
}

// toCentralWatermark maps a watermark's cut to central positions.
func toCentralWatermark(w Watermark, base uint32) Watermark {
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
