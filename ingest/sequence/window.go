package sequence

import "fmt"

// Kind is what an arrival's number says about its stream.
type Kind uint8

// The kinds of arrival (doc.go draws where each falls).
const (
	// First is the first number of the stream (or after Reset): what
	// came before it is unknown.
	First Kind = iota
	// Next is one after the newest number seen.
	Next
	// Ahead is further ahead than Next: Result.Skipped numbers were
	// jumped over and are holes until they arrive or are declared lost.
	Ahead
	// Duplicate is a number seen before within the window: drop it.
	Duplicate
	// Reordered is a number behind the newest, not seen before and not
	// declared lost: it fills its hole. No loss, no discontinuity.
	Reordered
	// Late is a number whose hole was already declared lost (it left the
	// window, or was given up or flushed): new data, but its loss has
	// been counted.
	Late
	// Suspect is a number far from the newest, with Config.Probation: a
	// possible restart of the numbering, not taken; the window is
	// unchanged. The next number after it confirms the restart.
	Suspect
	// Restart is the sender's numbering restarted: the window starts
	// again at this number, and the holes it had are declared lost
	// (Result.Lost).
	Restart
)

var kindNames = [...]string{"first", "next", "ahead", "duplicate", "reordered", "late", "suspect", "restart"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Taken reports whether an arrival of this kind is data the receiver has
// not had (everything but Duplicate and Suspect).
func (k Kind) Taken() bool { return k != Duplicate && k != Suspect }

// Result is the classification of one arrival.
type Result struct {
	Kind Kind
	// Skipped is, for Ahead, how many numbers were jumped over.
	Skipped int
	// Lost is how many holes this arrival declared lost: holes that left
	// the window as it moved (Ahead, Next) or that a Restart dropped.
	Lost int
}

// Config shapes a Window.
type Config struct {
	// Bits is the width of the sequence number: 8 (MAVLink), 16 (RTP), up
	// to 32. Required.
	Bits int
	// Window is how many of the newest numbers are remembered: a power of
	// two, 2 to 2^(Bits-1). A duplicate older than that cannot be told
	// from new data, and a hole that old is declared lost. Required.
	Window int
	// MaxJump is how far ahead of the newest a number may be and still be
	// taken as Ahead (a loss); further is a restart of the numbering.
	// Default (0): 2^Bits - Window, every number that is not behind in
	// the window is ahead (nothing is far: right for 8 bits).
	MaxJump int
	// Probation: a far number is Suspect, and a restart only when the
	// next arrival follows it (RFC 3550 A.1). Default off: Restart at once.
	Probation bool
	// Tags: Observe's tag tells a duplicate (same number, same tag) from
	// a sender that restarted its numbering (same number, another tag):
	// MAVLink passes the frame's checksum. Default off: tags are ignored.
	Tags bool
}

// Slot states.
const (
	stUnknown uint8 = iota // not known: before the first number, or after a restart
	stSeen
	stHole // skipped, not decided
	stGone // a hole declared lost
)

// slot is what a Window knows of one number: its state and its tag
// (one slice, one bounds check on the fast path; the tag is kept with
// or without Config.Tags and read only with it).
type slot struct {
	tag   uint32
	state uint8
}

// Window classifies the arrivals of one numbered stream. Not safe for
// concurrent use.
type Window struct {
	mask      uint32 // 2^Bits - 1
	wmask     uint32 // Window - 1
	size      uint32 // Window
	maxJump   uint32
	probation bool
	tags      bool

	started bool
	top     uint32 // newest number seen; never moves backwards but at a restart
	holes   int    // slots in stHole
	slots   []slot // by number & wmask
	// suspect is the number expected after a Suspect (Probation).
	suspect    uint32
	suspecting bool
	// extra widens MaxJump for the next arrival (AfterDrops).
	extra uint32
	// fast is the number whose arrival Observe takes in its fast path:
	// top+1 while that is all there is to it (started, no holes, no
	// extra, no suspect), else noFast. refresh keeps it.
	fast uint64
}

// noFast is Window.fast when no number takes the fast path: above every
// number (2^32 - 1 at the most).
const noFast = uint64(1) << 32

// New returns an empty Window; the first arrival is First.
func New(c Config) (*Window, error) {
	if c.Bits < 2 || c.Bits > 32 {
		return nil, fmt.Errorf("%w: bits %d (want 2 to 32)", ErrConfig, c.Bits)
	}
	space := uint64(1) << c.Bits
	if c.Window < 2 || c.Window&(c.Window-1) != 0 || uint64(c.Window) > space/2 {
		return nil, fmt.Errorf("%w: window %d (want a power of two, 2 to %d)", ErrConfig, c.Window, space/2)
	}
	most := space - uint64(c.Window)
	if c.MaxJump < 0 || uint64(c.MaxJump) > most {
		return nil, fmt.Errorf("%w: max jump %d (want 0 for the default, up to %d)", ErrConfig, c.MaxJump, most)
	}
	w := &Window{mask: uint32(space - 1), wmask: uint32(c.Window - 1), size: uint32(c.Window),
		maxJump: uint32(c.MaxJump), probation: c.Probation, tags: c.Tags, slots: make([]slot, c.Window)}
	if c.MaxJump == 0 {
		w.maxJump = uint32(most)
	}
	w.fast = noFast
	return w, nil
}

// MustNew is New for a Config known to be right (a package's constant);
// it panics on a bad one.
func MustNew(c Config) *Window {
	w, err := New(c)
	if err != nil {
		panic(err)
	}
	return w
}

// Top returns the newest number seen, and false before the first.
func (w *Window) Top() (uint32, bool) { return w.top, w.started }

// Pending is how many holes wait to be filled or declared lost.
func (w *Window) Pending() int { return w.holes }

// AfterDrops says that the receiver itself dropped n arrivals just
// before the next one (a full queue): a jump ahead that they explain —
// up to MaxJump + n — is a loss, not a restart of the numbering.
func (w *Window) AfterDrops(n int) {
	if n > 0 {
		w.extra = uint32(min(uint64(n), uint64(w.mask-w.size+1-w.maxJump)))
		w.fast = noFast
	}
}

// Observe classifies the arrival of number seq (taken mod 2^Bits) with
// tag (see Config.Tags) and records it.
func (w *Window) Observe(seq, tag uint32) Result {
	if seq &= w.mask; w.TakeNext(seq, tag) {
		return Result{Kind: Next}
	}
	return w.observe(seq, tag)
}

// TakeNext is Observe's fast path alone, for a caller's own: when seq is
// the next number and nothing else is pending (no holes, no AfterDrops,
// no suspect), it records seq and reports true — Observe would have
// returned Next with nothing lost. Else it records nothing and reports
// false: call Observe. Small enough to be inlined (Observe, with its
// call to the rest, is not): the common case costs a comparison and a
// slot (BenchmarkFramePath under callgrind).
func (w *Window) TakeNext(seq, tag uint32) bool {
	if seq &= w.mask; uint64(seq) != w.fast {
		return false
	}
	w.slots[seq&w.wmask] = slot{tag: tag, state: stSeen}
	w.top, w.fast = seq, uint64((seq+1)&w.mask)
	return true
}

// refresh sets fast after a change that Observe's fast path does not make.
func (w *Window) refresh() {
	w.fast = noFast
	if w.started && w.holes == 0 && w.extra == 0 && !w.suspecting {
		w.fast = uint64((w.top + 1) & w.mask)
	}
}

// observe is Observe but for its fast path (TakeNext).
func (w *Window) observe(seq, tag uint32) Result {
	r := w.classify(seq, tag)
	w.refresh()
	return r
}

// classify is observe but for refresh.
func (w *Window) classify(seq, tag uint32) Result {
	extra := w.extra
	w.extra = 0
	if !w.started {
		w.reset(seq, tag)
		return Result{Kind: First}
	}
	if back := (w.top - seq) & w.mask; back < w.size {
		i := seq & w.wmask
		switch w.slots[i].state {
		case stSeen:
			if w.tags && w.slots[i].tag != tag {
				return w.far(seq, tag)
			}
			w.suspecting = false
			return Result{Kind: Duplicate}
		case stHole:
			w.holes--
			w.seen(i, tag)
			return Result{Kind: Reordered}
		case stGone:
			w.seen(i, tag)
			return Result{Kind: Late}
		default:
			w.seen(i, tag)
			return Result{Kind: Reordered}
		}
	}
	d := (seq - w.top) & w.mask
	if d > w.maxJump+extra {
		return w.far(seq, tag)
	}
	w.suspecting = false
	lost := w.advance(seq, d, tag)
	if d == 1 {
		return Result{Kind: Next, Lost: lost}
	}
	return Result{Kind: Ahead, Skipped: int(d - 1), Lost: lost}
}

func (w *Window) seen(i, tag uint32) {
	w.suspecting = false
	w.slots[i] = slot{tag: tag, state: stSeen}
}

// advance moves top d numbers ahead to seq, the numbers between becoming
// holes; it returns how many holes were declared lost: those that left
// the window, and skipped numbers that never entered it.
func (w *Window) advance(seq, d, tag uint32) int {
	lost := 0
	if d >= w.size {
		lost = w.holes + int(d-w.size)
		for i := range w.slots {
			w.slots[i].state = stHole
		}
		w.holes = int(w.size - 1)
	} else {
		for k := uint32(1); k < d; k++ {
			i := (w.top + k) & w.wmask
			if w.slots[i].state == stHole {
				lost++
			} else {
				w.holes++
			}
			w.slots[i].state = stHole
		}
		if i := seq & w.wmask; w.slots[i].state == stHole {
			lost++
			w.holes--
		}
	}
	w.top = seq
	w.seen(seq&w.wmask, tag)
	return lost
}

// far handles a number that is neither in the window nor ahead within
// MaxJump (or a number seen with another tag).
func (w *Window) far(seq, tag uint32) Result {
	if w.probation && !(w.suspecting && seq == w.suspect) {
		w.suspecting, w.suspect = true, (seq+1)&w.mask
		return Result{Kind: Suspect}
	}
	lost := w.holes
	w.reset(seq, tag)
	return Result{Kind: Restart, Lost: lost}
}

// Reset forgets the stream: the next arrival is First. Its holes are
// declared lost and counted in the result.
func (w *Window) Reset() int {
	lost := w.holes
	clear(w.slots)
	w.holes, w.started, w.suspecting, w.extra, w.fast = 0, false, false, 0, noFast
	return lost
}

func (w *Window) reset(seq, tag uint32) {
	clear(w.slots)
	w.holes, w.started, w.top = 0, true, seq
	w.seen(seq&w.wmask, tag)
}

// GiveUp declares lost the hole at seq, if seq is one; it returns 1 for
// a hole, else 0. For a reorder buffer that stopped waiting for seq: its
// arrival afterwards is Late.
func (w *Window) GiveUp(seq uint32) int {
	seq &= w.mask
	if !w.started || (w.top-seq)&w.mask >= w.size {
		return 0
	}
	if i := seq & w.wmask; w.slots[i].state == stHole {
		w.slots[i].state = stGone
		w.holes--
		w.refresh()
		return 1
	}
	return 0
}

// GiveUpBefore declares lost every hole behind seq in the window (seq at
// most one past the newest); it returns how many.
func (w *Window) GiveUpBefore(seq uint32) int {
	if w.holes == 0 || !w.started {
		return 0
	}
	seq &= w.mask
	back := (w.top - seq) & w.mask // seq = top - back
	if back >= w.size {
		if (seq-w.top)&w.mask != 1 {
			return 0
		}
		back = 0 // one past the newest: everything behind it, the newest's own slot seen
	} else {
		back++
	}
	n := 0
	for b := back; b < w.size && w.holes > 0; b++ {
		if i := (w.top - b) & w.wmask; w.slots[i].state == stHole {
			w.slots[i].state = stGone
			w.holes--
			n++
		}
	}
	w.refresh()
	return n
}

// Flush declares every hole lost, for a stream gone quiet: nothing will
// move the window for a while. It returns how many.
func (w *Window) Flush() int {
	if w.holes == 0 {
		return 0
	}
	n := w.holes
	for i := range w.slots {
		if w.slots[i].state == stHole {
			w.slots[i].state = stGone
		}
	}
	w.holes = 0
	w.refresh()
	return n
}
