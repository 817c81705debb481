package replicate

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
	"github.com/edge-agent/edge-agent/wire"
)

// A deterministic model of one agent id's chain on one stream, for
// property tests of the resume decision (Decide), the epoch base and the
// watermark rule over random interleavings. In addition to the real-server
// tests, not instead: JetStream's rules as the replicator relies on them —
// a transaction is atomic (all or nothing), it lands only when the last
// sequence on the cut subject is the one it expects, a commit whose ack
// timed out may still land later (or never), and a server restored from
// an older copy continues from the old last sequence. The local store:
// one segment; a power cut loses a tail (its committed-cut record with
// it, or not); a wipe makes a new store; retention deletes what the local
// record says is committed.

type mEvent struct {
	id int
	t  int64
}

type mStore struct {
	id        string
	station   string
	events    []mEvent // by offset
	head      uint64
	recovered uint64
	record    *uint64 // the local committed-cut record
	recordBy  string  // the run that last wrote record or high
	high      *uint64 // the committed high-water mark after a resend
	// opens are the kept Opens: run and recovered tail.
	opens     []mOpen
	base      uint32
	instances map[string]bool
	pending   *pendingResume
}

// clone is a deep copy of the store (a backup).
func (s *mStore) clone() *mStore {
	c := *s
	c.events = append([]mEvent(nil), s.events...)
	c.opens = append([]mOpen(nil), s.opens...)
	c.instances = maps.Clone(s.instances)
	if s.record != nil {
		r := *s.record
		c.record = &r
	}
	if s.high != nil {
		h := *s.high
		c.high = &h
	}
	if s.pending != nil {
		p := *s.pending
		c.pending = &p
	}
	return &c
}

func (s *mStore) topo() localstream.Topology {
	tp := oneSegment(uint64(len(s.events)))
	seg := tp.Segments[0]
	seg.Start = s.head
	tp.Segments[0] = seg
	return tp
}

type mOpen struct {
	inst string
	rec  uint64
}

type mBatch struct {
	expect uint64
	events []mCentralEvent
	rec    wire.CommitRecord
}

type mCentralEvent struct {
	id  int
	pos localstream.Position
}

type mMsg struct {
	ev  *mCentralEvent
	rec *wire.CommitRecord
}

type mCentral struct {
	trace *[]string
	msgs  []mMsg
	late  []mBatch
	// ever maps every central position that ever held an event to it.
	ever map[localstream.Position]int
}

func (c *mCentral) last() Committed {
	for i := len(c.msgs) - 1; i >= 0; i-- {
		if c.msgs[i].rec != nil {
			return Committed{Seq: uint64(i + 1), Record: *c.msgs[i].rec}
		}
	}
	return Committed{}
}

// gaps are the gap markers in the chain as it is now.
func (c *mCentral) gaps() []wire.LostRange {
	var out []wire.LostRange
	for _, m := range c.msgs {
		if m.rec != nil && m.rec.Lost != nil {
			out = append(out, *m.rec.Lost)
		}
	}
	return out
}

// apply lands a batch when its expectation holds, checking the
// properties on the way.
func (c *mCentral) apply(t *testing.T, b mBatch) (Committed, bool) {
	t.Helper()
	last := c.last()
	defer func() {
		if t.Failed() {
			tr := *c.trace
			t.Logf("trace:\n%s", strings.Join(tr[max(0, len(tr)-60):], "\n"))
		}
	}()
	*c.trace = append(*c.trace, fmt.Sprintf("  apply txn %d store %s base %d expect %d (last %d) cut %s lost %v events %d", b.rec.Txn, b.rec.Store, b.rec.EpochBase, b.expect, last.Seq, b.rec.CutText, b.rec.Lost, len(b.events)))
	if last.Seq != b.expect {
		return Committed{}, false
	}
	if last.Seq > 0 && (b.rec.Watermark.LowerNs < last.Record.Watermark.LowerNs || b.rec.Watermark.UpperNs < last.Record.Watermark.UpperNs) {
		t.Errorf("committed watermark moved back: txn %d (%d, %d) after txn %d (%d, %d)", b.rec.Txn,
			b.rec.Watermark.LowerNs, b.rec.Watermark.UpperNs, last.Record.Txn, last.Record.Watermark.LowerNs, last.Record.Watermark.UpperNs)
	}
	gaps := c.gaps()
	if b.rec.Lost != nil {
		gaps = append(gaps, *b.rec.Lost)
	}
	rep := lossReport{lost: gaps}
	for _, e := range b.events {
		if id, seen := c.ever[e.pos]; seen && id != e.id {
			t.Errorf("central position %s reused: event %d, earlier %d", e.pos, e.id, id)
		}
		if g := rep.inGap(e.pos); g != nil {
			t.Errorf("event %d committed at %s inside reported gap %s", e.id, e.pos, g)
		}
		c.ever[e.pos] = e.id
		c.msgs = append(c.msgs, mMsg{ev: &e})
	}
	rec := b.rec
	c.msgs = append(c.msgs, mMsg{rec: &rec})
	return Committed{Seq: uint64(len(c.msgs)), Record: rec}, true
}

// forget keeps only the positions the surviving state knows: those in
// the chain, and those the local store knows it committed (its record or
// high-water mark, under its base). A position both sides lost (the
// centre with its tail, the store with its data and record) cannot be
// known to have been used: "never reused" is a promise about what
// survives.
func (c *mCentral) forget(s *mStore) {
	old := c.ever
	c.ever = map[localstream.Position]int{}
	for _, m := range c.msgs {
		if m.ev != nil {
			c.ever[m.ev.pos] = m.ev.id
		}
	}
	known := uint64(0)
	if s.record != nil {
		known = *s.record
	}
	if s.high != nil {
		known = max(known, *s.high)
	}
	for p, id := range old {
		if p.Segment == shift(0, s.base) && p.Offset < known {
			c.ever[p] = id
		}
	}
}

// loseTail truncates the chain after a random earlier commit (a restore
// from an older copy); batches in flight die with the old server.
func (c *mCentral) loseTail(rng *rand.Rand) {
	var ends []int
	for i, m := range c.msgs {
		if m.rec != nil {
			ends = append(ends, i+1)
		}
	}
	keep := 0
	if len(ends) > 0 {
		if k := rng.IntN(len(ends) + 1); k > 0 {
			keep = ends[k-1]
		}
	}
	c.msgs = c.msgs[:keep]
	c.late = nil
}

type mRun struct {
	instance       string
	started, ready bool
	decided        bool
	startSeq       uint64
	own, adopted   int
	takeover       bool
	prev           Committed
	from           uint64
	lost           *wire.LostRange
	recordedAtOpen *uint64
	recordedBy     string
	refusals       int
}

type model struct {
	trace []string
	// backup is a copy of the store taken earlier (nil: none).
	backup  *mStore
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	nextID  int
	store   *mStore
	run     *mRun
	central *mCentral
	stores  int
	stats   map[string]int
}

func (m *model) newRun(takeover bool) {
	inst := fmt.Sprintf("run%d", m.nextID)
	m.nextID++
	m.store.instances[inst] = true
	m.run = &mRun{instance: inst, takeover: takeover}
	if m.store.record != nil {
		r := *m.store.record
		m.run.recordedAtOpen = &r
	}
	if h := m.store.high; h != nil {
		r := *h
		m.run.recordedAtOpen = &r
	}
	m.run.recordedBy = m.store.recordBy
	m.store.recovered = uint64(len(m.store.events))
	m.store.opens = append(m.store.opens, mOpen{inst, m.store.recovered})
	if len(m.store.opens) > maxOpens {
		m.store.opens = m.store.opens[len(m.store.opens)-maxOpens:]
	}
}

// recoveredAfter mirrors Replicator.recoveredAfter.
func (s *mStore) recoveredAfter(inst string) (localstream.StreamCut, bool) {
	start := 0
	for i, o := range s.opens {
		if o.inst == inst {
			start = i + 1
		}
	}
	if start >= len(s.opens) {
		return localstream.StreamCut{}, false
	}
	low := s.opens[start].rec
	for _, o := range s.opens[start+1:] {
		low = min(low, o.rec)
	}
	return at(low), true
}

func (m *model) newStore() {
	m.stores++
	m.store = &mStore{id: fmt.Sprintf("store%d", m.stores), station: "M1", instances: map[string]bool{}}
}

func (m *model) resume() {
	r, s := m.run, m.store
	c := m.central.last()
	var act ResumeAction
	fresh := true
	floor := s.recovered
	if r.recordedBy != "" && r.recordedBy != r.instance {
		if c, ok := s.recoveredAfter(r.recordedBy); ok {
			floor = c.Positions[0]
		}
	}
	stale := !r.decided && s.high != nil && *s.high > floor
	var committed *uint64
	in := m.input(c)
	if s.pending != nil && s.pending.matches(c) && !stale && s.topo().Validate(s.pending.From) == nil && !in.lostRecorded() {
		p := s.pending
		act, fresh = ResumeAction{Kind: p.Kind, From: p.From, Base: p.Base, Lost: p.Lost}, false
	} else {
		s.pending = nil
		act = Decide(in)
		if in.Committed != nil {
			o := in.Committed.Positions[0]
			committed = &o
		}
	}
	if !r.started {
		r.started, r.startSeq = true, c.Seq
	}
	m.stats[act.Kind.String()]++
	m.trace = append(m.trace, fmt.Sprintf("resume store %s run %s len %d rec %v recOpen %v recovered %d head %d base %d last seq %d %s(%s base %d) -> %s from %s base %d lost %v fresh %v err %v",
		s.id, r.instance, len(s.events), ptrStr(s.record), ptrStr(r.recordedAtOpen), s.recovered, s.head, s.base, c.Seq, c.Record.CutText, c.Record.Store, c.Record.EpochBase, act.Kind, act.From, act.Base, act.Lost, fresh, act.Err))
	switch act.Kind {
	case ResumeRefuse:
		// The station's own store is refused only behind a record of
		// before store identities, or a late commit of a predecessor after
		// it adopted one; then an operator acts: restart with --takeover.
		if errors.Is(act.Err, ErrTwin) && (c.Record.Store != "" || c.Record.Txn > 1) {
			m.t.Logf("trace:\n%s", strings.Join(m.trace[max(0, len(m.trace)-60):], "\n"))
			m.t.Errorf("the station's own store refused: %v", act.Err)
		}
		r.refusals++
		m.stats["refused"]++
		m.newRun(true)
		return
	case ResumeRebase, ResumeResend:
		if fresh {
			s.pending = &pendingResume{Seq: c.Seq, Txn: c.Record.Txn, Instance: c.Record.Instance, Kind: act.Kind, From: act.From, Base: act.Base, Lost: act.Lost}
			switch {
			case act.Kind == ResumeRebase:
				s.high = nil
			case committed != nil && *committed > act.From.Positions[0] && (s.high == nil || *committed > *s.high):
				h := *committed
				s.high, s.recordBy = &h, r.instance
			}
		}
		from := act.From.Positions[0]
		s.record, s.recordBy = &from, r.instance
		r.lost = act.Lost
	case ResumeContinue:
		if act.Adopt {
			r.adopted++
		}
		if c.Seq > 0 {
			from := act.From.Positions[0]
			s.record, s.recordBy = &from, r.instance
			if s.high != nil && from >= *s.high {
				s.high = nil
			}
		}
	}
	s.base = act.Base
	r.decided = true
	r.from = act.From.Positions[0]
	r.prev, r.ready = c, true
}

// input is the decision's input, as chain.go builds it.
func (m *model) input(c Committed) ResumeInput { return m.inputFor(m.run, m.store, c) }

// inputFor is input for run r of store s.
func (m *model) inputFor(r *mRun, s *mStore, c Committed) ResumeInput {
	topo := s.topo()
	in := ResumeInput{Stream: "t", Store: s.id, Station: s.station, Instance: r.instance, KnownInstance: func(i string) bool { return s.instances[i] },
		Takeover: r.takeover, Base: s.base, Topo: topo, Head: at(s.head), Recovered: at(s.recovered), RecoveredAfter: s.recoveredAfter, Last: c,
		Started: r.started, StartSeq: r.startSeq, KnownSeq: r.prev.Seq, OwnCommits: r.own, Adopted: r.adopted, Decided: r.decided,
		Now: m.now}
	if s.record != nil && *s.record <= uint64(len(s.events)) && *s.record >= s.head {
		cut := at(*s.record)
		in.Committed = &cut
	}
	if r.prev.Seq > 0 && (r.prev.Record.Store == s.id) {
		if pc, err := r.prev.Record.StreamCut(); err == nil {
			if l, ok := toLocal(pc, r.prev.Record.EpochBase); ok && topo.Validate(l) == nil && (in.Committed == nil || l.Positions[0] > in.Committed.Positions[0]) {
				in.Committed = &l
			}
		}
	}
	if r.recordedAtOpen != nil {
		cut := at(*r.recordedAtOpen)
		in.RecordedAtOpen = &cut
		in.RecordedBy = r.recordedBy
	}
	return in
}

// trackerWM is a watermark tracker that rewinds: a smaller cut gives a
// smaller watermark (as watermark.Tracker does for a rebuilt, smaller
// transaction), so only the replicator's rule keeps the chain monotone.
func (m *model) trackerWM(o uint64) watermark.Watermark {
	w := watermark.Watermark{Cut: at(o)}
	if o > 0 {
		w.LowerNs, w.UpperNs = m.store.events[o-1].t, m.store.events[o-1].t
	}
	return w
}

func (m *model) commit() {
	r, s := m.run, m.store
	avail := uint64(len(s.events)) - r.from
	k := uint64(m.rng.IntN(int(min(avail, 6)) + 1))
	if k == 0 && r.lost == nil && m.rng.IntN(3) > 0 {
		return
	}
	cut := at(r.from + k)
	wm := monotoneWatermark(s.topo(), m.trackerWM(r.from+k), r.prev.Record, s.id, s.base)
	rec := wire.CommitRecord{Agent: "a", Stream: "t", Txn: r.prev.Record.Txn + 1, Instance: r.instance, Store: s.id, Station: s.station,
		EpochBase: s.base, Lost: r.lost, Cut: toCentral(cut, s.base).Map(), CutText: toCentral(cut, s.base).String(),
		Watermark: wire.WatermarkJSON{LowerNs: wm.LowerNs, UpperNs: wm.UpperNs, Cut: toCentral(wm.Cut, s.base).Map()}, Events: int(k)}
	b := mBatch{expect: r.prev.Seq, rec: rec}
	for o := r.from; o < r.from+k; o++ {
		b.events = append(b.events, mCentralEvent{id: s.events[o].id, pos: localstream.Position{Segment: shift(0, s.base), Offset: o}})
	}
	switch x := m.rng.IntN(20); {
	case x < 14: // acked
		c, ok := m.central.apply(m.t, b)
		if !ok {
			m.stats["conflict"]++
			r.ready = false
			return
		}

		r.prev, r.from, r.own = c, r.from+k, r.own+1
		s.pending = nil
		from := r.from
		s.record, s.recordBy = &from, r.instance
		if s.high != nil && from >= *s.high {
			s.high = nil
		}
		if r.lost != nil {
			r.lost, s.pending = nil, nil
		}
	case x < 17: // the ack times out; the commit may land later
		m.central.late = append(m.central.late, b)
		m.stats["late"]++
		r.ready = false
	case x < 18: // lost on the way
		r.ready = false
	default: // landed, ack lost
		m.central.apply(m.t, b)
		r.ready = false
	}
}

func (m *model) step() {
	m.now = m.now.Add(100 * time.Millisecond)
	switch x := m.rng.IntN(100); {
	case x < 40:
		m.store.events = append(m.store.events, mEvent{id: m.nextID, t: m.now.UnixNano()})
		m.nextID++
	case x < 78:
		if !m.run.ready {
			m.resume()
		} else {
			m.commit()
		}
	case x < 84:
		if len(m.central.late) > 0 {
			i := m.rng.IntN(len(m.central.late))
			b := m.central.late[i]
			m.central.late = append(m.central.late[:i], m.central.late[i+1:]...)
			if _, ok := m.central.apply(m.t, b); ok {
				m.stats["landed-late"]++
			}
		}
	case x < 87: // a clean restart
		m.newRun(false)
		m.trace = append(m.trace, "RESTART")
	case x < 90: // a power cut loses a tail (periodic durability)
		n := uint64(len(m.store.events))
		k := uint64(m.rng.IntN(8))
		if k > n-m.store.head {
			k = n - m.store.head
		}
		if b := m.backup; b != nil && b.id == m.store.id && n-k < uint64(len(b.events)) {
			// A backup holds what was durable: a power cut after it
			// never loses what it copied.
			k = n - uint64(len(b.events))
		}
		m.store.events = m.store.events[:n-k]
		if r := m.store.record; r != nil && *r > n-k && m.rng.IntN(2) == 0 {
			m.store.record = nil // the record was lost too
		}
		m.central.forget(m.store)
		m.stats["tail-lost"]++
		m.trace = append(m.trace, fmt.Sprintf("TAIL LOST %d -> %d, record %v", n, n-k, ptrStr(m.store.record)))
		m.newRun(false)
	case x < 91: // the directory is wiped
		m.newStore()
		m.newRun(false)
		m.central.forget(m.store)
		m.stats["wiped"]++
		m.trace = append(m.trace, "WIPED")
	case x < 93: // the centre restored from an older copy
		m.central.loseTail(m.rng)
		m.central.forget(m.store)
		m.run.ready = false
		m.stats["central-tail-lost"]++
		m.trace = append(m.trace, fmt.Sprintf("CENTRAL TAIL LOST -> %d msgs, last %s", len(m.central.msgs), m.central.last().Record.CutText))
	case x < 96: // retention: delete what the local record says is committed
		if r := m.store.record; r != nil && *r <= uint64(len(m.store.events)) && *r > m.store.head {
			m.store.head = *r
			m.trace = append(m.trace, fmt.Sprintf("RETENTION head %d", *r))
		}
	case x < 97: // a backup of the store
		m.backup = m.store.clone()
		m.trace = append(m.trace, fmt.Sprintf("BACKUP at %d events", len(m.store.events)))
	case x < 98: // the store restored from its backup (its later runs' notes gone)
		if m.backup == nil || m.backup.id != m.store.id {
			return
		}
		m.store = m.backup.clone()
		m.newRun(false)
		m.central.forget(m.store)
		m.stats["restored"]++
		m.trace = append(m.trace, fmt.Sprintf("RESTORED to %d events", len(m.store.events)))
	case x < 99: // the incumbent is silent for an hour; a twin on another station starts
		m.now = m.now.Add(time.Hour)
		m.twin()
	}
}

// twin is a second station's store with the same agent id deciding on
// the chain as it is, however long the incumbent has been silent: it is
// refused, naming both, whenever the chain holds a record.
func (m *model) twin() {
	c := m.central.last()
	if c.Seq == 0 {
		return
	}
	tw := &mStore{id: fmt.Sprintf("twin%d", m.nextID), station: "M2", instances: map[string]bool{"twinrun": true}}
	for range m.rng.IntN(20) {
		tw.events = append(tw.events, mEvent{id: -1, t: m.now.UnixNano()})
	}
	tw.recovered = uint64(len(tw.events))
	tw.opens = []mOpen{{"twinrun", tw.recovered}}
	act := Decide(m.inputFor(&mRun{instance: "twinrun"}, tw, c))
	m.trace = append(m.trace, fmt.Sprintf("TWIN after an hour of silence: %s %v", act.Kind, act.Err))
	m.stats["twin"]++
	if act.Kind != ResumeRefuse || !errors.Is(act.Err, ErrTwin) {
		m.t.Errorf("a twin on another station, after the incumbent was silent for an hour: %s (%v), want refused with ErrTwin", act.Kind, act.Err)
	}
}

// preIdentity starts the chain with a commit record without a store
// identity, as agents of before identities wrote, holding k events at
// positions of base 0. legacy: the store is the one that wrote it
// (upgraded in place: it holds those events and its local record of the
// committed cut was written by the old version, no recorder noted); it
// must continue the chain as its own. Otherwise the record is another
// store's: the store is refused until the operator's takeover, and
// nothing it holds is skipped.
func (m *model) preIdentity(legacy bool) {
	k := uint64(m.rng.IntN(8))
	var b mBatch
	for o := range k {
		id := -m.nextID // another store's event
		if legacy {
			id = m.nextID
			m.store.events = append(m.store.events, mEvent{id: id, t: m.now.UnixNano()})
		}
		m.nextID++
		b.events = append(b.events, mCentralEvent{id: id, pos: localstream.Position{Segment: 0, Offset: o}})
	}
	b.rec = wire.CommitRecord{Agent: "a", Stream: "t", Txn: 1, Instance: "old-version", Cut: at(k).Map(), CutText: at(k).String(), Events: int(k)}
	if _, ok := m.central.apply(m.t, b); !ok {
		m.t.Fatal("the first record did not land")
	}
	if legacy {
		r := k
		m.store.record = &r
	}
	m.stats["pre-identity"]++
	m.trace = append(m.trace, fmt.Sprintf("PRE-IDENTITY record %s legacy %v", b.rec.CutText, legacy))
}

// TestResumePropertiesModel: over random interleavings of appends,
// commits (acked, late, lost, ack lost), restarts, lost local tails,
// wiped stores (a replaced disk on the same station), centres restored
// from older copies, retention, stores restored from a backup, hour-long
// silences of the incumbent while a twin on another station starts (it
// is refused every time), and records of before store identities (the
// store is refused until the operator's takeover, never continues as if
// it were its own): the
// chain's committed watermarks never move back, no central position ever
// holds two events, no committed event lies inside a reported gap, and
// the chain never stops moving (every interleaving ends caught up).
func TestResumePropertiesModel(t *testing.T) {
	seed := testkit.Seed(t)
	for round := range testkit.Rounds(40) {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		m := &model{t: t, rng: rng, now: time.Unix(1_700_000_000, 0), central: &mCentral{ever: map[localstream.Position]int{}}, stats: map[string]int{}}
		m.central.trace = &m.trace
		m.newStore()
		switch round % 4 {
		case 1:
			m.preIdentity(false)
		case 2:
			m.preIdentity(true)
		}
		m.newRun(false)
		for range 2000 {
			m.step()
			if t.Failed() {
				t.FailNow()
			}
		}
		// No more faults: the chain must catch up with the store.
		for i := 0; ; i++ {
			if i > 2000 {
				t.Fatalf("round %d: stalled: %d local events, chain at %+v, run %+v", round, len(m.store.events), m.central.last().Record.CutText, m.run)
			}
			m.now = m.now.Add(100 * time.Millisecond)
			if !m.run.ready {
				m.resume()
				continue
			}
			if m.run.from == uint64(len(m.store.events)) && m.run.lost == nil {
				break
			}
			m.commit()
		}
		// Everything the current store holds after the chain's start is
		// there once.
		ids := map[int]int{}
		for _, msg := range m.central.msgs {
			if msg.ev != nil {
				ids[msg.ev.id]++
				if ids[msg.ev.id] > 1 {
					t.Logf("trace:\n%s", strings.Join(m.trace[max(0, len(m.trace)-4000):], "\n"))
					t.Fatalf("round %d: event %d twice at the centre (second at %s)", round, msg.ev.id, msg.ev.pos)
				}
			}
		}
		if round == 0 {
			t.Logf("round 0: %d events, %d central messages, decisions and faults %v", len(m.store.events), len(m.central.msgs), m.stats)
		}
	}
}

func ptrStr(p *uint64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
