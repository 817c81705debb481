package replicate

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Uplink is the shared byte-rate cap of all streams' replication, served in
// priority order: while a higher-priority stream waits, a lower one gets no
// bytes. Bytes are granted in chunks, so a large video message yields to
// telemetry between chunks. A stream that has more to send at once
// (WaitMore, the chunks of one Wait) keeps the turn for up to holdFor
// after each grant: its events are separate waits, and without the hold
// each of them would wait for a chunk of a less urgent backlog (a
// telemetry backlog drained one event per video chunk). It is safe for
// concurrent use.
//
// On the wire: connections dialed through Dialer are metered, and then
// the cap is charged with the bytes actually written to them — packs as
// compressed and framed, the NATS protocol's own lines and headers, the
// live lane and the API requests alike — not with what a waiter asked
// for. A wait is then a reservation made before its bytes exist (a pack
// is compressed and written at its commit): it is paid at once, and the
// bytes written later consume it before anything more is charged, so the
// link carries what the cap allows whatever the compression, with
// priority kept in the agent rather than in a socket's queue. Waiters
// should ask for their bytes as they will be on the wire (the replicator
// scales each event by the compression its packs achieved); a
// reservation larger than what is written stays as credit for the next
// writes. docs/sync.md, "uplink cap".
type Uplink struct {
	// bps is the cap in bytes/s (0: unlimited); chunk the largest grant
	// of one turn (the bucket's depth is depth()).
	bps   float64
	chunk int
	// sent counts bytes written to metered connections; metered is set
	// once Dialer was used.
	sent    atomic.Int64
	metered atomic.Bool

	// bucket is the token bucket as a theoretical arrival time (GCRA):
	// tat is when every byte charged so far has been paid for; a grant
	// waits until tat - depth ≤ now. reserved are bytes granted to
	// waiters that the meter has not seen written yet. Guarded by bmu.
	// credit are bytes reserved that were not written (Settle), granted
	// again without waiting, at most maxCredit.
	bmu      sync.Mutex
	tat      time.Time
	reserved int64
	credit   int64

	mu sync.Mutex
	// queue holds the waiters in (priority, arrival) order. Guarded by mu.
	queue []*uplinkWaiter
	// busy is set while one waiter draws tokens. Guarded by mu.
	busy bool
	seq  uint64
	// held is set while the turn is kept for priority heldPrio (until
	// heldUntil): no less urgent waiter is served meanwhile; heldTimer
	// serves the queue when the hold ends. Guarded by mu.
	held      bool
	heldPrio  int
	heldUntil time.Time
	heldTimer *time.Timer
}

// holdFor bounds how long the turn waits for a stream that has more to
// send: what the link may idle when it does not come back. A variable
// only for BenchmarkVideoDrainHold (0: no hold); never changed otherwise.
var holdFor = 5 * time.Millisecond

type uplinkWaiter struct {
	prio  int
	seq   uint64
	ready chan struct{}
}

// NewUplink returns a cap of bytesPerSec (≤ 0: unlimited).
func NewUplink(bytesPerSec int64) *Uplink {
	if bytesPerSec <= 0 {
		return &Uplink{}
	}
	chunk := int(min(max(bytesPerSec/50, 1024), 64<<10))
	return &Uplink{bps: float64(bytesPerSec), chunk: chunk}
}

// BytesPerSec is the cap, 0 when unlimited.
func (u *Uplink) BytesPerSec() int64 {
	if u == nil {
		return 0
	}
	return int64(u.bps)
}

// Sent is how many bytes were written to the connections dialed through
// Dialer, 0 if none was.
func (u *Uplink) Sent() int64 {
	if u == nil {
		return 0
	}
	return u.sent.Load()
}

// Metered reports whether the cap is charged on the wire (Dialer used).
func (u *Uplink) Metered() bool { return u != nil && u.metered.Load() }

// dur is how long n bytes take at the cap.
func (u *Uplink) dur(n int) time.Duration {
	return time.Duration(float64(n) / u.bps * float64(time.Second))
}

// grant charges n bytes and returns how long to wait before they may go.
func (u *Uplink) grant(n int) time.Duration {
	u.bmu.Lock()
	defer u.bmu.Unlock()
	now := time.Now()
	if u.metered.Load() {
		u.reserved += int64(n)
		c := min(int64(n), u.credit)
		u.credit -= c
		n -= int(c)
	}
	u.tat = later(u.tat, now).Add(u.dur(n))
	return u.tat.Sub(now) - u.dur(u.depth())
}

// depth is how far grants may run ahead of the cap: a quarter second
// of it (maxCredit), at least a chunk. A link that was idle takes the
// first quarter second of a backlog at once: a pack's bytes go out
// only once all its events are granted, and a bucket of one chunk
// (20 ms) paced the first pack of a drain while the link stayed idle.
// The link is asked for no more ahead of the cap than the credit
// allows already.
func (u *Uplink) depth() int { return int(u.maxCredit()) }

// maxCredit bounds the credit: what the link may be asked to carry ahead
// of the cap, a quarter second of it.
func (u *Uplink) maxCredit() int64 { return max(int64(u.chunk), int64(u.bps/4)) }

// Settle tells a metered uplink that of reserved bytes granted before
// (the estimates of a pack's events), only written went to the link:
// the rest, still reserved, becomes credit for the next grants. Without
// it an estimate too high would be charged and the link left idle for it.
// Bytes written beyond the estimate need no settling: the meter charged
// them.
func (u *Uplink) Settle(reserved, written int64) {
	if !u.Metered() || u.bps == 0 || reserved <= written {
		return
	}
	u.bmu.Lock()
	defer u.bmu.Unlock()
	back := min(reserved-written, u.reserved)
	u.reserved -= back
	u.credit = min(u.credit+back, u.maxCredit())
}

// refund gives back a grant of n bytes that was not waited out.
func (u *Uplink) refund(n int) {
	u.bmu.Lock()
	defer u.bmu.Unlock()
	u.tat = u.tat.Add(-u.dur(n))
	if u.metered.Load() {
		u.reserved = max(u.reserved-int64(n), 0)
	}
}

// wrote charges n bytes written to a metered connection: first against
// the reservations, then to the bucket. It never blocks the writer.
func (u *Uplink) wrote(n int) {
	u.sent.Add(int64(n))
	if u.bps == 0 {
		return
	}
	u.bmu.Lock()
	defer u.bmu.Unlock()
	paid := min(int64(n), u.reserved)
	u.reserved -= paid
	if rest := int64(n) - paid; rest > 0 {
		u.tat = later(u.tat, time.Now()).Add(u.dur(int(rest)))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait blocks until n bytes may be sent by a stream of priority prio
// (lower is more urgent), or ctx ends.
func (u *Uplink) Wait(ctx context.Context, prio, n int) error {
	return u.WaitMore(ctx, prio, n, false)
}

// WaitMore is Wait for a stream that will wait again at once when more
// is set (another event at hand): the turn is kept for it (holdFor).
func (u *Uplink) WaitMore(ctx context.Context, prio, n int, more bool) error {
	if u == nil || u.bps == 0 {
		return nil
	}
	u.mu.Lock()
	u.seq++
	seq := u.seq
	u.mu.Unlock()
	for n > 0 {
		k := min(n, u.chunk)
		if err := u.turn(ctx, prio, seq); err != nil {
			return err
		}
		err := sleep(ctx, u.grant(k))
		if err != nil {
			u.refund(k)
		}
		n -= k
		u.release(prio, err == nil && (n > 0 || more))
		if err != nil {
			return err
		}
	}
	return nil
}

// turn waits until the waiter is first in line and nobody draws tokens.
func (u *Uplink) turn(ctx context.Context, prio int, seq uint64) error {
	w := &uplinkWaiter{prio: prio, seq: seq, ready: make(chan struct{})}
	u.mu.Lock()
	i, _ := slices.BinarySearchFunc(u.queue, w, cmpWaiter)
	u.queue = slices.Insert(u.queue, i, w)
	u.dispatchLocked()
	u.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		u.mu.Lock()
		defer u.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: hand the turn on
			u.busy = false
		default:
			u.queue = slices.DeleteFunc(u.queue, func(x *uplinkWaiter) bool { return x == w })
		}
		u.dispatchLocked()
		return ctx.Err()
	}
}

// release ends a turn of priority prio; hold keeps the next one for it.
func (u *Uplink) release(prio int, hold bool) {
	u.mu.Lock()
	u.busy = false
	if hold {
		u.held, u.heldPrio, u.heldUntil = true, prio, time.Now().Add(holdFor)
	}
	u.dispatchLocked()
	u.mu.Unlock()
}

// dispatchLocked gives the turn to the first waiter, unless it is held
// for a more urgent stream. Lock should be held.
func (u *Uplink) dispatchLocked() {
	if u.busy || len(u.queue) == 0 {
		return
	}
	w := u.queue[0]
	if u.held {
		if d := time.Until(u.heldUntil); w.prio > u.heldPrio && d > 0 {
			if u.heldTimer == nil {
				u.heldTimer = time.AfterFunc(d, func() {
					u.mu.Lock()
					defer u.mu.Unlock()
					u.heldTimer = nil
					u.dispatchLocked()
				})
			}
			return
		}
		u.held = false // the holder (or a more urgent stream) is back, or the hold ran out
	}
	u.queue = u.queue[1:]
	u.busy = true
	close(w.ready)
}

func cmpWaiter(a, b *uplinkWaiter) int {
	if c := cmp.Compare(a.prio, b.prio); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// DefaultPriority is the default order: telemetry, health, video, then the rest.
func DefaultPriority(stream string) int {
	switch stream {
	case "telemetry":
		return 0
	case "health":
		return 1
	case "video":
		return 2
	}
	return 3
}
