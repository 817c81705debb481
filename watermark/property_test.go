package watermark

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// envInt reads an integer knob from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestPropertyRandomInterleavings drives the core through random
// interleavings of Late calls, appends with their marks, scales (splits
// and merges), committed cuts, local watermarks, idle time and closes, and
// checks after every watermark:
//
//	(a) no watermark's lower exceeds the event time of a non-late event
//	    outside its cut (events in flight, asked but not yet appended,
//	    included: they will land outside every current cut);
//	(b) lower and cut are monotone;
//	(c) the cut covers [0,1) exactly once (Validate), and a committed
//	    watermark's cut is at or before the committed cut.
//
// A quarter of the transactions fail: the watermark returned for them is
// checked like any other, but the next cut is rebuilt from the last one
// committed (so it may lie before the failed one), and monotonicity (b) is
// checked against the last committed watermark.
//
// EDGE_ROUNDS sets the number of runs (default 60), WATERMARK_SEED the
// first seed.
func TestPropertyRandomInterleavings(t *testing.T) {
	rounds := envInt("EDGE_ROUNDS", 60)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("WATERMARK_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed=%d rounds=%d (rerun with WATERMARK_SEED=%d)", seed, rounds, seed)
	var total propStats
	for r := range rounds {
		s := seed + uint64(r)
		st, err := runProperty(s, s%2 == 1)
		if err != nil {
			t.Fatalf("seed=%d: %v", s, err)
		}
		total.add(st)
	}
	t.Logf("%+v", total)
	if total.fallbacks > 0 {
		t.Logf("localstream Topology.Covering failed %d times; the watermark cut fell back to the safe cut", total.fallbacks)
	}
	// The runs must have exercised what they claim to.
	if total.committedEmitted == 0 || total.localEmitted == 0 || total.scales == 0 || total.late == 0 ||
		total.idleSkips == 0 || total.checkedOutside == 0 || total.rejected == 0 || total.rewound == 0 || total.restarts == 0 {
		t.Fatalf("property runs did not exercise every path: %+v", total)
	}
}

type propStats struct {
	committedEmitted, localEmitted, scales, late, rejected, idleSkips, checkedOutside int
	fallbacks, failedTxns, rewound, restarts                                          int
}

func (p *propStats) add(o propStats) {
	p.committedEmitted += o.committedEmitted
	p.localEmitted += o.localEmitted
	p.scales += o.scales
	p.late += o.late
	p.rejected += o.rejected
	p.idleSkips += o.idleSkips
	p.checkedOutside += o.checkedOutside
	p.fallbacks += o.fallbacks
	p.failedTxns += o.failedTxns
	p.rewound += o.rewound
	p.restarts += o.restarts
}

// propWriter is a writer of the simulation.
type propWriter struct {
	id       string
	keys     []string
	t        int64 // its source clock
	inflight *int64
	since    int64 // when inflight was asked
}

func runProperty(seed uint64, lateness bool) (propStats, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	trace := func(format string, args ...any) {
		if os.Getenv("WATERMARK_TRACE") != "" {
			fmt.Printf(format+"\n", args...)
		}
	}
	var ps propStats
	idle := int64(1000)
	lat := int64(0)
	if lateness {
		lat = int64(rng.IntN(30))
	}
	sim := newSimStream("video", 1+rng.IntN(3))
	// The core is driven through a Tracker over the simulated stream and an
	// in-memory meta store, so that restarts (a crash: the Tracker is
	// dropped and rebuilt from what it persisted) are part of the
	// interleavings. Marks are written every call, never but first ones
	// and closes, or every 3 idle timeouts.
	view := &simView{sim: sim}
	meta := newMemMeta()
	flush := []time.Duration{-1, time.Hour, 3 * time.Duration(idle)}[rng.IntN(3)]
	opts := Options{IdleTimeout: time.Duration(idle), AllowedLateness: time.Duration(lat), MarkFlushInterval: flush,
		Now: func() time.Time { return time.Unix(0, view.now) }}
	tr, err := NewTracker(view, meta, opts)
	if err != nil {
		return ps, err
	}
	var stats Stats
	restart := func() error {
		s := tr.Stats()
		stats.CoveringFallbacks += s.CoveringFallbacks
		stats.CommittedRewound += s.CommittedRewound
		var err error
		tr, err = NewTracker(view, meta, opts)
		return err
	}
	view.now = 1_000_000
	keys := []string{"papa", "echo", "sierra", "delta", "november", "india", "tango", "charlie", "juliet", "kilo"}
	var writers []*propWriter
	for i := range 2 + rng.IntN(4) {
		w := &propWriter{id: fmt.Sprintf("w%d", i), t: int64(rng.IntN(50)), keys: []string{keys[rng.IntN(len(keys))]}}
		if i == 0 {
			w.keys = append(w.keys, keys[rng.IntN(len(keys))]) // a writer of two routing keys
		}
		writers = append(writers, w)
	}
	var (
		committedCut localstream.StreamCut
		lastLocal    Watermark
		lastComm     Watermark
	)
	inflight := func() []simEvent {
		var out []simEvent
		for _, w := range writers {
			if w.inflight != nil {
				out = append(out, simEvent{writer: w.id, t: *w.inflight, pos: localstream.Position{Offset: ^uint64(0)}})
			}
		}
		return out
	}
	check := func(kind string, topo localstream.Topology, prev, w Watermark, bound *localstream.StreamCut) error {
		if w.IsZero() {
			if !prev.IsZero() {
				return fmt.Errorf("%s watermark went back to none", kind)
			}
			return nil
		}
		if err := topo.Validate(w.Cut); err != nil { // (c)
			return fmt.Errorf("%s watermark cut %s: %w", kind, w.Cut, err)
		}
		if bound != nil {
			if le, err := topo.LessEq(w.Cut, *bound); err != nil || !le {
				return fmt.Errorf("%s watermark cut %s passes committed cut %s (%v)", kind, w.Cut, *bound, err)
			}
		}
		if !prev.IsZero() { // (b)
			if w.LowerNs < prev.LowerNs {
				return fmt.Errorf("%s lower went back: %d after %d", kind, w.LowerNs, prev.LowerNs)
			}
			if le, err := topo.LessEq(prev.Cut, w.Cut); err != nil || !le {
				return fmt.Errorf("%s cut went back: %s after %s (%v)", kind, w.Cut, prev.Cut, err)
			}
		}
		for _, e := range append(slices.Clone(sim.events), inflight()...) { // (a)
			if e.late {
				continue
			}
			if e.pos.Offset != ^uint64(0) {
				in, err := markInside(topo, w.Cut, mark{pos: []localstream.Position{e.pos}})
				if err != nil {
					return err
				}
				if in {
					continue
				}
			}
			ps.checkedOutside++
			if e.t < w.LowerNs {
				return fmt.Errorf("%s watermark %s passes non-late event of %s at %s time %d", kind, w, e.writer, e.pos, e.t)
			}
		}
		return nil
	}
	steps := 150 + rng.IntN(250)
	for range steps {
		switch op := rng.IntN(100); {
		case op < 55: // an event: Late (unless asked before), append, Note
			w := writers[rng.IntN(len(writers))]
			var et int64
			var late bool
			if w.inflight != nil {
				et, late = *w.inflight, false
				w.inflight = nil
			} else {
				et = nextTime(rng, w)
				late = tr.Late(w.id, et)
			}
			trace("now=%d append %s t=%d late=%v", view.now, w.id, et, late)
			p := sim.append(w.keys[rng.IntN(len(w.keys))])
			sim.events = append(sim.events, simEvent{pos: p, writer: w.id, t: et, late: late})
			if late {
				ps.late++
			}
			if err := tr.Note(w.id, et, p); err != nil {
				if !errors.Is(err, ErrTimeBackwards) {
					return ps, fmt.Errorf("note %s %d %s: %w", w.id, et, p, err)
				}
				if !late {
					return ps, fmt.Errorf("note refused (%v) for an event Late did not flag", err)
				}
				ps.rejected++
			}
		case op < 60: // ask Late view.now, append later (an event in flight)
			w := writers[rng.IntN(len(writers))]
			if w.inflight != nil {
				continue
			}
			et := nextTime(rng, w)
			if tr.Late(w.id, et) {
				// A late event: append it flagged right away.
				p := sim.append(w.keys[0])
				sim.events = append(sim.events, simEvent{pos: p, writer: w.id, t: et, late: true})
				ps.late++
				if err := tr.Note(w.id, et, p); err != nil && !errors.Is(err, ErrTimeBackwards) {
					return ps, err
				}
				continue
			}
			w.inflight, w.since = &et, view.now
			trace("now=%d inflight %s t=%d", view.now, w.id, et)
		case op < 68: // time passes
			// The model's one assumption: an append completes within
			// inflightHold idle timeouts (here within 5).
			for _, w := range writers {
				if w.inflight != nil && view.now-w.since > 5*idle {
					p := sim.append(w.keys[0])
					sim.events = append(sim.events, simEvent{pos: p, writer: w.id, t: *w.inflight})
					if err := tr.Note(w.id, *w.inflight, p); err != nil {
						return ps, fmt.Errorf("note of an event in flight: %w", err)
					}
					w.inflight = nil
				}
			}
			view.now += int64(rng.IntN(int(idle * 3 / 2)))
			trace("now=%d", view.now)
			ps.idleSkips += tr.Stats().Writers - tr.Stats().ActiveWriters
		case op < 70:
			w := writers[rng.IntN(len(writers))]
			trace("close %s", w.id)
			if err := tr.CloseWriter(w.id); err != nil {
				return ps, err
			}
		case op < 72: // crash and restart: events in flight are lost
			trace("restart")
			for _, w := range writers {
				w.inflight = nil
			}
			if err := restart(); err != nil {
				return ps, fmt.Errorf("restart: %w", err)
			}
			ps.restarts++
		case op < 75:
			if err := randomScale(rng, sim); err != nil {
				return ps, err
			}
			ps.scales++
		case op < 92: // a commit
			topo := sim.snapshot()
			if len(sim.events) == 0 {
				continue
			}
			base := committedCut
			if base.IsZero() {
				// The stream's first segments at 0 (the cut before anything).
				base = firstCut(topo)
			}
			var pos []localstream.Position
			for range 1 + rng.IntN(4) {
				pos = append(pos, sim.events[rng.IntN(len(sim.events))].pos)
			}
			// Covering from the stream's start, then joined with the
			// previous committed cut (Covering with a base inside a merge
			// successor trips a localstream bug; see the report).
			next, err := topo.Covering(firstCut(topo), pos...)
			if err != nil {
				return ps, fmt.Errorf("sim covering %s %v: %w\n%s", base, pos, err, dumpTopo(topo))
			}
			if next, err = topo.Join(base, next); err != nil {
				return ps, fmt.Errorf("sim join: %w", err)
			}
			// A quarter of the transactions fail: their cut is not
			// adopted, and the next one is rebuilt from the last committed
			// cut, possibly smaller than the failed one.
			failed := rng.IntN(4) == 0
			if failed && rng.IntN(2) == 0 {
				next = topo.TailCut() // a big transaction that fails
			}
			w, err := tr.CommittedAt(next)
			if err != nil {
				return ps, fmt.Errorf("committedAt %s: %w", next, err)
			}
			trace("committed %s at %s failed=%v", w, next, failed)
			if err := check("committed", topo, lastComm, w, &next); err != nil {
				return ps, err
			}
			if failed {
				ps.failedTxns++
				continue
			}
			committedCut = next
			if !w.Equal(lastComm) {
				ps.committedEmitted++
			}
			lastComm = w
		default:
			topo := sim.snapshot()
			w, err := tr.Local()
			if err != nil {
				return ps, fmt.Errorf("localAt: %w", err)
			}
			if err := check("local", topo, lastLocal, w, nil); err != nil {
				return ps, err
			}
			trace("local %s", w)
			if !w.Equal(lastLocal) {
				ps.localEmitted++
			}
			lastLocal = w
		}
	}
	if err := restart(); err != nil { // fold the last tracker's counters in
		return ps, err
	}
	ps.fallbacks, ps.rewound = int(stats.CoveringFallbacks), int(stats.CommittedRewound)
	return ps, nil
}

// nextTime advances a writer's source clock: mostly forward, sometimes a
// little back (reordering), rarely far back (a clock jump).
func nextTime(rng *rand.Rand, w *propWriter) int64 {
	switch r := rng.IntN(100); {
	case r < 80:
		w.t += int64(rng.IntN(20))
		return w.t
	case r < 95:
		return w.t - int64(rng.IntN(40))
	default:
		return w.t - 200
	}
}

// firstCut is the cut before the first event: epoch-0 segments at 0.
func firstCut(topo localstream.Topology) localstream.StreamCut {
	c := localstream.StreamCut{Stream: topo.Stream, Positions: map[localstream.SegmentID]uint64{}}
	for id, s := range topo.Segments {
		if len(s.Predecessors) == 0 {
			c.Positions[id] = 0
		}
	}
	return c
}

// randomScale splits a random open segment or merges two adjacent ones.
func randomScale(rng *rand.Rand, sim *simStream) error {
	open := sim.topo.Open()
	slices.SortFunc(open, func(a, b localstream.Segment) int { return cmp.Compare(a.Range.Low, b.Range.Low) })
	if len(open) > 1 && (len(open) > 6 || rng.IntN(2) == 0) {
		i := rng.IntN(len(open) - 1)
		_, err := sim.merge(open[i].ID, open[i+1].ID)
		return err
	}
	_, err := sim.split(open[rng.IntN(len(open))].ID, 2+rng.IntN(2))
	return err
}

// dumpTopo renders a topology for failure messages.
func dumpTopo(topo localstream.Topology) string {
	var b []byte
	for _, id := range slices.Sorted(maps.Keys(topo.Segments)) {
		s := topo.Segments[id]
		b = fmt.Appendf(b, "%s %s sealed=%v len=%d preds=%v succs=%v\n", id, s.Range, s.Sealed, s.Length, s.Predecessors, s.Successors)
	}
	return string(b)
}

// simView shows a simStream to a Tracker, with the test's clock.
type simView struct {
	sim *simStream
	now int64
}

func (v *simView) Name() string                   { return v.sim.topo.Stream }
func (v *simView) Topology() localstream.Topology { return v.sim.snapshot() }

// memMeta is an in-memory MetaStore: what a crash leaves is exactly what
// was put.
type memMeta struct {
	m map[string][]byte
}

func newMemMeta() *memMeta { return &memMeta{m: map[string][]byte{}} }

func (m *memMeta) PutMeta(k string, v []byte) error { m.m[k] = slices.Clone(v); return nil }
func (m *memMeta) DeleteMeta(k string) error        { delete(m.m, k); return nil }
func (m *memMeta) GetMeta(k string) ([]byte, bool, error) {
	v, ok := m.m[k]
	return slices.Clone(v), ok, nil
}
func (m *memMeta) ScanMeta(prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for k, v := range m.m {
		if strings.HasPrefix(k, prefix) {
			out[k] = slices.Clone(v)
		}
	}
	return out, nil
}
