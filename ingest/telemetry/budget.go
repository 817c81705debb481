package telemetry

import (
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// The byte budget bounds the telemetry held in memory between the MQTT
// connections and the durable store — the lanes and the store's append
// queue — by bytes (Config.MaxBufferedBytes), not only by count: 4,096
// queued messages of 64 KiB are 256 MiB, and the store's queue takes
// 8,192 more. A message reserves its bytes before it is delivered (before
// anything acks it) and gives them back when it is durable or dropped.
// The reservation is made without Ingester.deliverMu held: a connection
// waiting for room (TCP then pushes back on its publisher) never holds up
// the others, and a small message passes as soon as a little room frees,
// where a big one waits for its own. (What of it the store's queue holds
// is bounded again, by storeWindow below.)
//
// One message always passes when nothing is held, so a budget below
// MaxPayload cannot wedge the intake (Config.Validate refuses it anyway).
type budget struct {
	max int64
	// held is the bytes reserved now.
	held atomic.Int64
	// waiters counts reservations waiting; room wakes one (capacity 1).
	waiters atomic.Int64
	room    chan struct{}
}

// msgBytes is what a message holds while it is buffered.
func msgBytes(m paho.Message) int64 { return int64(len(m.Payload()) + len(m.Topic())) }

// reserve takes n bytes of the budget, waiting while it is spent (counted
// once in budgetWaits); false: the ingester stopped first.
func (in *Ingester) reserve(n int64) bool {
	b := &in.budget
	if h := b.held.Add(n); h <= b.max || h == n {
		return true
	}
	b.held.Add(-n)
	in.c.budgetWaits.Add(1)
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	for {
		if h := b.held.Add(n); h <= b.max || h == n {
			return true
		}
		b.held.Add(-n)
		select {
		case <-b.room:
		case <-t.C:
			t.Reset(50 * time.Millisecond)
		case <-in.stopping:
			return false
		}
	}
}

// release gives n bytes back and wakes a waiting reservation.
func (in *Ingester) release(n int64) {
	b := &in.budget
	b.held.Add(-n)
	if b.waiters.Load() > 0 {
		select {
		case b.room <- struct{}{}:
		default:
		}
	}
}

// The store's append queue is one FIFO for every drone: what the
// dispatcher hands it, a good drone's message waits behind. The lanes
// take turns (dispatch), so the dispatcher keeps at most storeWindow bytes
// of telemetry in the store and not yet durable: a good drone's message
// then waits behind that window and one burst of each busy lane, not
// behind all of MaxBufferedBytes (at 4 MB/s — a loaded machine's fsyncs —
// 8 MiB is 2 s). The rest of the budget waits in the lanes.
type storeWindow struct {
	max int64
	// held is the bytes appended and not yet called back.
	held atomic.Int64
	// waiting: the dispatcher waits for room (room wakes it, capacity 1).
	waiting atomic.Bool
	room    chan struct{}
}

// storeWindowFor is the window for a max payload: 1 MiB, or two messages.
func storeWindowFor(maxPayload int) int64 { return max(1<<20, 2*int64(maxPayload)) }

// enterStore waits (the dispatcher) until n more bytes fit in the window
// (one item always does); false: the ingester stopped first.
func (in *Ingester) enterStore(n int64) bool {
	w := &in.window
	for {
		if h := w.held.Load(); h == 0 || h+n <= w.max {
			w.held.Add(n)
			return true
		}
		w.waiting.Store(true)
		if h := w.held.Load(); h == 0 || h+n <= w.max { // a callback came in between
			w.waiting.Store(false)
			continue
		}
		select {
		case <-w.room:
		case <-time.After(50 * time.Millisecond):
		case <-in.stopping:
			w.waiting.Store(false)
			return false
		}
		w.waiting.Store(false)
	}
}

// leaveStore gives n bytes of the window back (the append's callback).
func (in *Ingester) leaveStore(n int64) {
	w := &in.window
	w.held.Add(-n)
	if w.waiting.Load() {
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
}
