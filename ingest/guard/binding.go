package guard

import "time"

// Verdict is what a Binding says of a packet from a source.
type Verdict uint8

const (
	// Bound: from the source the id is bound to.
	Bound Verdict = iota
	// Taken: the id had no source; this one binds it.
	Taken
	// Rebound: the bound source was released or silent long enough, and
	// this one took the id over.
	Rebound
	// Spoofed: from another source while the bound one holds the id:
	// drop it.
	Spoofed
)

// Binding binds an id (a MAVLink system id, an RTP SSRC) to the source
// its first packet came from — a UDP sender's address and port, a TCP
// connection — as RFC 3550 §8.2 binds an SSRC to its transport address:
// the same id from anyone else is a collision, a loop, or, on a shared
// network, anyone speaking for the drone. Packets with the id from
// another source are spoofs (counted, dropped) until the bound source has
// been silent for the rebind time or was released (its connection
// closed); then the next source takes the id over (counted rebinds). A
// flood with a good id neither enters its stream nor keeps it alive; a
// sender that moves (a new port after a restart, a redialled link, a
// second radio) is taken after the silence.
//
// The zero Binding is unbound. Not safe for concurrent use: the owner's
// lock guards it.
type Binding[S comparable] struct {
	src S
	// last is the newest receive time from src (Unix ns).
	last  int64
	bound bool
	// released: src went away (its connection closed); the next source
	// takes the id at once.
	released bool
	// spoofed and rebinds count the verdicts Spoofed and Rebound.
	spoofed, rebinds uint64
}

// Admit judges a packet from src received at now. A source other than
// the bound one takes the id over once the bound one is released or has
// been silent for after, and only if may (a configured address it must
// come from, say); else it is Spoofed.
func (b *Binding[S]) Admit(src S, now int64, after time.Duration, may bool) Verdict {
	switch {
	case b.Holds(src, now):
		return Bound
	case !b.bound:
		b.src, b.last, b.bound = src, now, true
		return Taken
	case !may || !b.released && now-b.last < int64(after):
		b.spoofed++
		return Spoofed
	}
	b.src, b.last, b.released = src, now, false
	b.rebinds++
	return Rebound
}

// Holds is Admit's common case alone, for a caller's fast path: when src
// is the bound source it notes the packet as Admit does (Bound) and
// reports true; else it changes nothing and reports false: call Admit.
// Small enough to be inlined (Admit, at a call site, is not: the MAVLink
// frame path under callgrind).
func (b *Binding[S]) Holds(src S, now int64) bool {
	if !b.bound || b.src != src {
		return false
	}
	b.last, b.released = max(b.last, now), false
	return true
}

// Spoof counts a packet the caller found spoofed by its own rule (a
// report from neither the bound address nor its RTCP port).
func (b *Binding[S]) Spoof() { b.spoofed++ }

// Release lets the next source take the id at once (the bound
// connection closed), if src is the bound source.
func (b *Binding[S]) Release(src S) {
	if b.bound && b.src == src {
		b.released = true
	}
}

// Released reports whether the bound source was released (and no packet
// came since).
func (b *Binding[S]) Released() bool { return b.released }

// Source returns the bound source.
func (b *Binding[S]) Source() (S, bool) { return b.src, b.bound }

// Spoofed and Rebinds are the counts of those verdicts.
func (b *Binding[S]) Spoofed() uint64 { return b.spoofed }
func (b *Binding[S]) Rebinds() uint64 { return b.rebinds }
