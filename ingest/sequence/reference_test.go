package sequence

// refWindow is the plain reference the Window is checked against: the
// same rules over unwrapped (int64) numbers in a map, with no ring, no
// bit masks and no counters kept on the side.
type refWindow struct {
	cfg        Config
	space      int64
	maxJump    int64
	started    bool
	top        int64 // unwrapped
	st         map[int64]uint8
	tag        map[int64]uint32
	suspect    int64
	suspecting bool
	extra      int64
}

func newRef(c Config) *refWindow {
	r := &refWindow{cfg: c, space: 1 << c.Bits, st: map[int64]uint8{}, tag: map[int64]uint32{}}
	r.maxJump = int64(c.MaxJump)
	if c.MaxJump == 0 {
		r.maxJump = r.space - int64(c.Window)
	}
	return r
}

func (r *refWindow) mod(x int64) int64 { return ((x % r.space) + r.space) % r.space }

func (r *refWindow) holes() int {
	n := 0
	for _, s := range r.st {
		if s == stHole {
			n++
		}
	}
	return n
}

func (r *refWindow) reset(seq int64, tag uint32) {
	r.st, r.tag = map[int64]uint8{}, map[int64]uint32{}
	r.started, r.suspecting = true, false
	r.top = seq
	r.st[seq], r.tag[seq] = stSeen, tag
}

func (r *refWindow) afterDrops(n int) {
	if n > 0 {
		r.extra = min(int64(n), r.space-int64(r.cfg.Window)-r.maxJump)
	}
}

func (r *refWindow) observe(seq uint32, tag uint32) Result {
	s := r.mod(int64(seq))
	extra := r.extra
	r.extra = 0
	if !r.started {
		r.reset(s, tag)
		return Result{Kind: First}
	}
	if back := r.mod(r.top - s); back < int64(r.cfg.Window) {
		a := r.top - back
		st := r.st[a]
		if st == stSeen {
			if r.cfg.Tags && r.tag[a] != tag {
				return r.far(s, tag)
			}
			r.suspecting = false
			return Result{Kind: Duplicate}
		}
		r.suspecting = false
		r.st[a], r.tag[a] = stSeen, tag
		if st == stGone {
			return Result{Kind: Late}
		}
		return Result{Kind: Reordered}
	}
	d := r.mod(s - r.top)
	if d > r.maxJump+extra {
		return r.far(s, tag)
	}
	r.suspecting = false
	for a := r.top + 1; a < r.top+d; a++ {
		r.st[a] = stHole
	}
	r.top += d
	r.st[r.top], r.tag[r.top] = stSeen, tag
	lost := 0
	for a, st := range r.st {
		if a <= r.top-int64(r.cfg.Window) {
			if st == stHole {
				lost++
			}
			delete(r.st, a)
			delete(r.tag, a)
		}
	}
	if d == 1 {
		return Result{Kind: Next, Lost: lost}
	}
	return Result{Kind: Ahead, Skipped: int(d - 1), Lost: lost}
}

func (r *refWindow) far(s int64, tag uint32) Result {
	if r.cfg.Probation && !(r.suspecting && s == r.suspect) {
		r.suspecting, r.suspect = true, r.mod(s+1)
		return Result{Kind: Suspect}
	}
	lost := r.holes()
	r.reset(s, tag)
	return Result{Kind: Restart, Lost: lost}
}

func (r *refWindow) giveUpIf(pred func(a int64) bool) int {
	n := 0
	for a, st := range r.st {
		if st == stHole && pred(a) {
			r.st[a] = stGone
			n++
		}
	}
	return n
}

func (r *refWindow) giveUp(seq uint32) int {
	if !r.started {
		return 0
	}
	back := r.mod(r.top - int64(seq))
	if back >= int64(r.cfg.Window) {
		return 0
	}
	return r.giveUpIf(func(a int64) bool { return a == r.top-back })
}

func (r *refWindow) giveUpBefore(seq uint32) int {
	if !r.started {
		return 0
	}
	s := r.mod(int64(seq))
	if r.mod(s-r.top) == 1 {
		return r.giveUpIf(func(int64) bool { return true })
	}
	back := r.mod(r.top - s)
	if back >= int64(r.cfg.Window) {
		return 0
	}
	return r.giveUpIf(func(a int64) bool { return a < r.top-back })
}

func (r *refWindow) flush() int { return r.giveUpIf(func(int64) bool { return true }) }

func (r *refWindow) resetAll() int {
	n := r.holes()
	r.st, r.tag = map[int64]uint8{}, map[int64]uint32{}
	r.started, r.suspecting, r.extra = false, false, 0
	return n
}
