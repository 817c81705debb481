package sequence

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// pair drives a Window and the reference with the same operations and
// fails at the first answer they disagree on.
type pair struct {
	t    testing.TB
	w    *Window
	r    *refWindow
	step int
	log  []string // the last operations, for the failure message
	// calls counts the observations (every other one tries TakeNext first).
	calls int
}

func newPair(t testing.TB, c Config) *pair {
	w, err := New(c)
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	return &pair{t: t, w: w, r: newRef(c)}
}

func (p *pair) note(s string) {
	p.step++
	if len(p.log) == 12 {
		p.log = p.log[1:]
	}
	p.log = append(p.log, s)
}

func (p *pair) fail(what string, got, want any) {
	p.t.Helper()
	p.t.Fatalf("step %d, %s: window %v, reference %v (last operations %v)", p.step, what, got, want, p.log)
}

func (p *pair) check() {
	p.t.Helper()
	if g, w := p.w.Pending(), p.r.holes(); g != w {
		p.fail("pending", g, w)
	}
	gt, gok := p.w.Top()
	if gok != p.r.started || (gok && int64(gt) != p.r.mod(p.r.top)) {
		p.fail("top", gt, p.r.mod(p.r.top))
	}
}

func (p *pair) observe(seq, tag uint32) Result {
	p.t.Helper()
	p.note(fmt.Sprintf("observe(%d,%d)", seq, tag))
	// Every other arrival takes a caller's fast path (TakeNext, then
	// Observe when it did not take the number), as the MAVLink intake does.
	var g Result
	if p.calls++; p.calls%2 == 0 && p.w.TakeNext(seq, tag) {
		g = Result{Kind: Next}
	} else {
		g = p.w.Observe(seq, tag)
	}
	w := p.r.observe(seq, tag)
	if g != w {
		p.fail("observe", g, w)
	}
	p.check()
	return g
}

// counted checks an operation that returns a count (GiveUp, GiveUpBefore,
// Flush, Reset): g from the window, w from the reference.
func (p *pair) counted(op string, g, w int) {
	p.t.Helper()
	p.note(op)
	if g != w {
		p.fail(op, g, w)
	}
	p.check()
}

func (p *pair) giveUp(seq uint32) {
	p.counted(fmt.Sprintf("giveUp(%d)", seq), p.w.GiveUp(seq), p.r.giveUp(seq))
}

func (p *pair) giveUpBefore(seq uint32) {
	p.counted(fmt.Sprintf("giveUpBefore(%d)", seq), p.w.GiveUpBefore(seq), p.r.giveUpBefore(seq))
}

func (p *pair) flush() { p.counted("flush", p.w.Flush(), p.r.flush()) }

func (p *pair) reset() { p.counted("reset", p.w.Reset(), p.r.resetAll()) }

func (p *pair) afterDrops(n int) {
	p.note(fmt.Sprintf("afterDrops(%d)", n))
	p.w.AfterDrops(n)
	p.r.afterDrops(n)
}

// modelConfigs are the shapes tested: MAVLink's, RTP's (as video uses
// it), and small ones where the wrap comes every few arrivals.
var modelConfigs = []Config{
	{Bits: 8, Window: 64, Tags: true},
	{Bits: 16, Window: 1024, MaxJump: 512, Probation: true},
	{Bits: 4, Window: 4},
	{Bits: 4, Window: 8, MaxJump: 3, Probation: true, Tags: true},
	{Bits: 6, Window: 16, MaxJump: 20},
}

// TestModel runs random streams — losses, duplicates right away and long
// after, reorderings, restarts of the numbering, drops the receiver
// explains, and give-ups and flushes as a reorder buffer makes them —
// through the Window and the plain reference, which must agree on every
// answer. EDGE_SEED replays a run; EDGE_ROUNDS scales it.
func TestModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 37))
	for _, c := range modelConfigs {
		for round := range testkit.Rounds(20) {
			p := newPair(t, c)
			space := uint32(1) << c.Bits
			next := rng.Uint32N(space) // the sender's next number
			var sent []uint32          // what it sent, newest last: duplicates and late ones come from here
			for range 2000 {
				var seq uint32
				switch x := rng.IntN(100); {
				case x < 8: // lost
					next++
					continue
				case x < 14 && len(sent) > 0: // a duplicate or a late copy
					seq = sent[len(sent)-1-rng.IntN(min(len(sent), c.Window*2))]
				case x < 20: // a swap: the next one now, this one after
					p.observe(next+1, (next+1)%7)
					seq = next
					next += 2
					sent = append(sent, seq+1)
				case x < 22: // the sender restarts its numbering
					next = rng.Uint32N(space)
					seq, next = next, next+1
				case x < 24:
					p.giveUp(next - 1 - rng.Uint32N(uint32(c.Window)))
					continue
				case x < 25:
					p.giveUpBefore(next - rng.Uint32N(uint32(c.Window)))
					continue
				case x < 26:
					p.flush()
					continue
				case x < 27:
					p.afterDrops(rng.IntN(int(space)))
					continue
				case x < 28:
					seq = rng.Uint32N(space) // noise
				case x == 28:
					p.reset()
					continue
				default:
					seq, next = next, next+1
				}
				p.observe(seq, seq%7)
				sent = append(sent, seq)
				if len(sent) > 4*c.Window {
					sent = sent[len(sent)-2*c.Window:]
				}
			}
			_ = round
		}
	}
}

// TestStreamAccounting sends each number once or not at all, reordered
// and duplicated within half the window: every first arrival is taken,
// every copy is a duplicate, nothing is Late or a restart, the newest
// number never moves backwards, and after a Flush the losses counted are
// exactly the numbers never sent, each once.
func TestStreamAccounting(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 38))
	for _, c := range []Config{{Bits: 8, Window: 64, Tags: true}, {Bits: 16, Window: 1024, MaxJump: 512, Probation: true}} {
		for round := range testkit.Rounds(10) {
			n := 5000 + rng.IntN(5000)
			start := rng.Uint32N(1 << c.Bits)
			// The numbers sent (unwrapped), with their arrival slot jittered by
			// less than half the window, and a few copies.
			type arr struct {
				at   float64
				num  int
				copy bool
			}
			var arrivals []arr
			lost := 0
			for i := range n {
				if rng.IntN(10) == 0 && i > 0 {
					lost++
					continue
				}
				jit := float64(c.Window) / 4
				arrivals = append(arrivals, arr{at: float64(i) + rng.Float64()*jit, num: i})
				if rng.IntN(8) == 0 {
					arrivals = append(arrivals, arr{at: float64(i) + rng.Float64()*jit, num: i, copy: true})
				}
			}
			// A stable order by arrival slot; number 0 goes first (the stream's start).
			sortArrivals := func(a []arr) {
				for i := 1; i < len(a); i++ {
					for j := i; j > 1 && a[j].at < a[j-1].at; j-- {
						a[j], a[j-1] = a[j-1], a[j]
					}
				}
			}
			sortArrivals(arrivals)
			w := MustNew(c)
			got := map[int]bool{}
			counted := 0
			top := -1
			for _, a := range arrivals {
				tag := uint32(a.num * 2654435761)
				r := w.Observe(start+uint32(a.num), tag)
				counted += r.Lost
				switch {
				case got[a.num] && r.Kind != Duplicate:
					t.Fatalf("config %+v round %d: a copy of %d is %v", c, round, a.num, r.Kind)
				case !got[a.num] && (!r.Kind.Taken() || r.Kind == Late || r.Kind == Restart):
					t.Fatalf("config %+v round %d: the first arrival of %d is %v", c, round, a.num, r.Kind)
				}
				got[a.num] = true
				if a.num > top {
					top = a.num
				}
				if tw, _ := w.Top(); tw != (start+uint32(top))&(1<<c.Bits-1) {
					t.Fatalf("config %+v round %d: top %d after %d, want %d", c, round, tw, a.num, top)
				}
			}
			counted += w.Flush()
			// Numbers after the newest arrival were never announced: not counted.
			tail := 0
			for i := n - 1; i > top; i-- {
				tail++
			}
			if counted != lost-tail {
				t.Fatalf("config %+v round %d: %d lost counted, %d not sent (%d after the newest)", c, round, counted, lost-tail, tail)
			}
		}
	}
}

// TestIssueCases are issue 37's cases 1 and 2 as the window sees them.
func TestIssueCases(t *testing.T) {
	kinds := func(c Config, seqs ...uint32) ([]Kind, int) {
		w := MustNew(c)
		var ks []Kind
		lost := 0
		for _, s := range seqs {
			r := w.Observe(s, s*31)
			ks = append(ks, r.Kind)
			lost += r.Lost
		}
		return ks, lost + w.Flush()
	}
	mav := Config{Bits: 8, Window: 64, Tags: true}
	ks, lost := kinds(mav, 0, 1, 2, 3, 2, 3, 4, 5)
	if want := []Kind{First, Next, Next, Next, Duplicate, Duplicate, Next, Next}; fmt.Sprint(ks) != fmt.Sprint(want) || lost != 0 {
		t.Fatalf("late copies: %v lost %d, want %v lost 0", ks, lost, want)
	}
	ks, lost = kinds(mav, 254, 255, 1, 0, 2, 3)
	if want := []Kind{First, Next, Ahead, Reordered, Next, Next}; fmt.Sprint(ks) != fmt.Sprint(want) || lost != 0 {
		t.Fatalf("a swapped pair across the wrap: %v lost %d, want %v lost 0", ks, lost, want)
	}
	ks, lost = kinds(mav, 10, 11, 13, 14)
	if want := []Kind{First, Next, Ahead, Next}; fmt.Sprint(ks) != fmt.Sprint(want) || lost != 1 {
		t.Fatalf("a loss: %v lost %d, want %v lost 1", ks, lost, want)
	}
}
