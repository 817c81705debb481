package guard

// Refusal is why a connection was turned away (none: admitted).
type Refusal uint8

const (
	// Admitted: not refused.
	Admitted Refusal = iota
	// RefusedFull: Max are open and none has been idle for EvictAfter.
	RefusedFull
	// RefusedSource: its source address holds MaxPerSource.
	RefusedSource
)

// admission is the Limiter's deterministic core: which connections are
// open, which is evicted for a newcomer, which newcomer is refused. Time
// is an input (Unix ns). Its owner's lock guards it.
type admission struct {
	cfg   *LimiterConfig
	open  map[*Conn]struct{}
	bySrc map[string]int
	// idle counts the open connections not active (Conn.Active).
	idle int
	// reserved counts slots taken for connections not accepted yet
	// (reserve).
	reserved int
}

func newAdmission(cfg *LimiterConfig) *admission {
	return &admission{cfg: cfg, open: map[*Conn]struct{}{}, bySrc: map[string]int{}}
}

// admit takes c (from c.src, at now) in, or says why not. victim is an
// open connection removed to make room (the caller closes it); full
// tells which bound made it one: Max (true: idle for EvictAfter) or
// MaxIdle (false: the oldest not active, however recent).
func (a *admission) admit(c *Conn, now int64) (victim *Conn, r Refusal, full bool) {
	if len(a.open)+a.reserved >= a.cfg.Max {
		if victim = a.oldestIdle(now-int64(a.cfg.EvictAfter), c.src); victim == nil {
			return nil, RefusedFull, false
		}
		full = true
	}
	n := a.bySrc[c.src]
	if victim != nil && victim.src == c.src {
		n-- // its own idle connection makes room
	}
	if n >= a.cfg.MaxPerSource {
		return nil, RefusedSource, false
	}
	if victim == nil && a.idle >= a.cfg.MaxIdle {
		victim = a.oldestIdle(now, c.src)
	}
	if victim != nil {
		a.remove(victim)
	}
	a.open[c] = struct{}{}
	a.bySrc[c.src]++
	a.idle++
	c.quietSince = now
	return victim, Admitted, full
}

// reserve takes a slot for the next connection before it is accepted
// (it waits in the kernel's accept queue until there is one): a free
// slot, or that of the connection quiet the longest if it has been for
// EvictAfter (victim, removed: the caller closes it). ok false: none.
func (a *admission) reserve(now int64) (victim *Conn, ok bool) {
	if len(a.open)+a.reserved >= a.cfg.Max {
		if victim = a.oldestIdle(now-int64(a.cfg.EvictAfter), ""); victim == nil {
			return nil, false
		}
		a.remove(victim)
	}
	a.reserved++
	return victim, true
}

// admitReserved is admit into the slot reserve took: it is taken from
// the reservation (given back whatever the outcome), so the bound on Max
// holds without an eviction.
func (a *admission) admitReserved(c *Conn, now int64) (victim *Conn, r Refusal) {
	a.reserved--
	victim, r, _ = a.admit(c, now)
	return victim, r
}

// unreserve gives back a reservation no connection came for.
func (a *admission) unreserve() { a.reserved-- }

// oldestIdle returns the connection not active that has been quiet the
// longest, if it has been since before (nil: none); of those quiet as
// long, one from src (its own idle connection makes room for it first).
func (a *admission) oldestIdle(before int64, src string) *Conn {
	var v *Conn
	var vq int64
	for c := range a.open {
		if c.active > 0 {
			continue
		}
		if q := a.quiet(c); q <= before && (v == nil || q < vq || q == vq && c.src == src) {
			v, vq = c, q
		}
	}
	return v
}

// quiet is when c last did something: accepted, done with a request, or
// (ReadsAreActivity) read bytes.
func (a *admission) quiet(c *Conn) int64 {
	if a.cfg.ReadsAreActivity {
		return max(c.quietSince, c.lastRead.Load())
	}
	return c.quietSince
}

// activate marks c busy (a request served, a session connected) until
// deactivate: it is never evicted meanwhile.
func (a *admission) activate(c *Conn) {
	if c.gone {
		return
	}
	if c.active == 0 {
		a.idle--
	}
	c.active++
}

// deactivate ends one activate: c waits again from now.
func (a *admission) deactivate(c *Conn, now int64) {
	if c.gone || c.active == 0 {
		return
	}
	if c.active--; c.active == 0 {
		a.idle++
		c.quietSince = now
	}
}

// remove gives c's slot back, once.
func (a *admission) remove(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(a.open, c)
	if a.bySrc[c.src]--; a.bySrc[c.src] <= 0 {
		delete(a.bySrc, c.src)
	}
	if c.active == 0 {
		a.idle--
	}
}
