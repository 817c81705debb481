package replicate

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
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
type Uplink struct {
	lim   *rate.Limiter
	chunk int

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
	return &Uplink{lim: rate.NewLimiter(rate.Limit(bytesPerSec), chunk), chunk: chunk}
}

// BytesPerSec is the cap, 0 when unlimited.
func (u *Uplink) BytesPerSec() int64 {
	if u == nil || u.lim == nil {
		return 0
	}
	return int64(u.lim.Limit())
}

// Wait blocks until n bytes may be sent by a stream of priority prio
// (lower is more urgent), or ctx ends.
func (u *Uplink) Wait(ctx context.Context, prio, n int) error {
	return u.WaitMore(ctx, prio, n, false)
}

// WaitMore is Wait for a stream that will wait again at once when more
// is set (another event at hand): the turn is kept for it (holdFor).
func (u *Uplink) WaitMore(ctx context.Context, prio, n int, more bool) error {
	if u == nil || u.lim == nil {
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
		err := u.lim.WaitN(ctx, k)
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
