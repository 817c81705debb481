package telemetry

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/ingest/guard"
	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/localstream"
)

// item is one delivered message waiting in its drone's lane.
type item struct {
	msg paho.Message
	// ack acknowledges msg in its connection's delivery order (see ackOrder).
	ack func()
	// dedup keeps msg's dedup entry; nil: none (QoS 0, a clean session).
	dedup  dedup.Source
	topic  string
	recv   int64
	status bool
}

// lane is one drone's FIFO between the MQTT client and the store. Items of
// one lane are dispatched in order, so a drone's events land in the store
// in delivery order. Its queue grows only as far as it is used: an idle
// lane costs a few hundred bytes, not LaneDepth items.
type lane struct {
	drone, writer string

	// mu guards the fields below.
	mu sync.Mutex
	// q holds the queued items from q[head]; at most Config.LaneDepth.
	q    []item
	head int
	// pending counts appends queued in the store, not yet durable and
	// noted.
	pending int
	// noted: the lane's first watermark note is done; noting counts its
	// notes queued for noteLoop (see appended).
	noted  bool
	noting int
	// closeReq: an offline status waits for pending to reach 0.
	closeReq bool
	// closeAcks ack the offline status messages once the writer is closed.
	closeAcks []func()
	// closed: the writer was closed (offline status); the slot is free to
	// give back at once.
	closed bool
	// lastActive is the receive time (Unix ns) of the last item queued.
	lastActive int64
	// busy: the dispatcher took an item and has not finished with it.
	busy bool
	// held: the drone's writer is still being closed for an earlier lane
	// given back (see closeReleased); the dispatcher passes the lane over
	// until it is, so the close never lands after this lane's first note.
	held atomic.Bool

	// topic and headers are the headers of the last event built for the
	// lane (the dispatcher goroutine only): a drone publishes on one or a
	// few topics, and a shared, never modified slice saves an allocation
	// per message.
	topic   string
	headers []localstream.Header
}

func newLane(drone string, now int64) *lane {
	return &lane{drone: drone, writer: WriterFor(drone), lastActive: now}
}

// topicHeaders returns the event headers of a message on topic. The slice
// may be shared with earlier events: callers must not modify it.
func (l *lane) topicHeaders(topic string) []localstream.Header {
	if l.headers == nil || l.topic != topic {
		l.topic, l.headers = topic, []localstream.Header{{Key: HeaderTopic, Value: topic}}
	}
	return l.headers
}

// push queues it unless the lane holds max items.
func (l *lane) push(it item, max int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.q)-l.head >= max {
		return false
	}
	l.q = append(l.q, it)
	l.lastActive = it.recv
	if !it.status {
		l.closed = false // the drone is back: its next note reopens the writer
	}
	return true
}

// pop takes the oldest item.
func (l *lane) pop() (item, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == len(l.q) {
		return item{}, false
	}
	it := l.q[l.head]
	l.q[l.head] = item{}
	l.head++
	l.busy = true
	if l.head == len(l.q) { // empty: start over; give a large buffer back
		l.head = 0
		if cap(l.q) > 64 {
			l.q = nil
		} else {
			l.q = l.q[:0]
		}
	}
	return it, true
}

// drained reports whether nothing of the lane is queued or in flight:
// its slot may be given back once it is idle (activity).
func (l *lane) drained() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head == len(l.q) && !l.busy && l.pending == 0 && !l.closeReq
}

// activity is the receive time of the lane's last item; math.MinInt64
// once its writer is closed (offline): its slot goes first.
func (l *lane) activity() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return math.MinInt64
	}
	return l.lastActive
}

// done ends the dispatcher's work on the item it took last.
func (l *lane) done() {
	l.mu.Lock()
	l.busy = false
	l.mu.Unlock()
}

// knownLane returns the drone's lane, nil if it has none.
func (in *Ingester) knownLane(drone string) *lane {
	in.lanesMu.RLock()
	defer in.lanesMu.RUnlock()
	l, _ := in.lanes.Peek(drone)
	return l
}

// newLanes is the drones' table (guard.Table, MaxDrones lanes): when all
// are taken, a new drone takes the slot of a lane with nothing queued or
// in flight whose drone is offline, or silent for DroneIdleTimeout (by
// the lane's own clock, kept under its lock); none while MaxDrones
// released writers wait to be closed.
func (in *Ingester) newLanes() *guard.Table[string, *lane] {
	return guard.NewTable(guard.TableConfig[string, *lane]{
		Max: in.cfg.MaxDrones, Idle: in.cfg.DroneIdleTimeout,
		Active:  func(_ string, l *lane) int64 { return l.activity() },
		Busy:    func(_ string, l *lane) bool { return len(in.closeQ) == cap(in.closeQ) || !l.drained() },
		Release: func(_ string, l *lane) { in.releaseLane(l) },
	})
}

// laneFor returns the drone's lane, creating it (which may give back the
// slot of an idle one); nil if every slot is held. Called only with
// in.deliverMu held (as enqueue is), so a lane given back here cannot
// have an enqueue in progress. It never waits: a released lane's writer
// is closed by closeReleased, off every delivery.
func (in *Ingester) laneFor(drone string, now int64) *lane {
	in.lanesMu.RLock()
	l, _ := in.lanes.Peek(drone)
	in.lanesMu.RUnlock()
	if l != nil {
		return l
	}
	in.lanesMu.Lock()
	defer in.lanesMu.Unlock()
	l = newLane(drone, now)
	if _, ok := in.closing[drone]; ok {
		l.held.Store(true)
	}
	if !in.lanes.Add(drone, l, now) {
		return nil
	}
	in.ring = append(in.ring, l)
	return l
}

// releaseLane takes a lane the table gave back out of the dispatch ring;
// its writer, if still open, is closed for watermarks by closeReleased
// (a synchronous store write: done here, with deliverMu held, every
// delivery waited for it — hundreds of releases a second stalled every
// drone for seconds). in.lanesMu is held.
func (in *Ingester) releaseLane(l *lane) {
	if i := slices.Index(in.ring, l); i >= 0 {
		in.ring = slices.Delete(in.ring, i, i+1)
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if !closed && in.sink.Marks != nil {
		in.closing[l.drone] = struct{}{}
		in.closeQ <- l // never blocks: Busy holds every lane while closeQ is full, sent only here, under lanesMu
	}
	in.c.dronesReleased.Add(1)
}

// closeReleased closes the writers of released lanes, in release order,
// until Run stops (then it closes those still queued). A drone that came
// back meanwhile has a held lane: it is let go once its old writer is
// closed.
func (in *Ingester) closeReleased() {
	for {
		var l *lane
		select {
		case l = <-in.closeQ:
		case <-in.stopping:
			select {
			case l = <-in.closeQ:
			default:
				return
			}
		}
		if err := in.sink.Marks.CloseWriter(l.writer); err != nil {
			in.c.markErrors.Add(1)
		}
		in.lanesMu.Lock()
		delete(in.closing, l.drone)
		if back, _ := in.lanes.Peek(l.drone); back != nil {
			back.held.Store(false)
		}
		in.lanesMu.Unlock()
		select {
		case in.wake <- struct{}{}:
		default:
		}
	}
}

// enqueue puts it into l, waiting (counted) while the lane or all lanes
// together hold LaneDepth items. It gives up when the ingester stops: the
// message stays unacked and the broker redelivers it.
func (in *Ingester) enqueue(l *lane, it item) {
	for counted := false; ; {
		if in.buffered.Load() < int64(in.cfg.LaneDepth) && l.push(it, in.cfg.LaneDepth) {
			in.buffered.Add(1)
			break
		}
		if !counted {
			in.c.laneFullWaits.Add(1)
			in.waitingSince.Store(in.cfg.Now().UnixNano())
			defer in.waitingSince.Store(0)
			counted = true
		}
		select {
		case <-in.space:
		case <-time.After(50 * time.Millisecond):
		case <-in.stopping:
			return
		}
	}
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// dispatchBurst is how many items, and dispatchBurstBytes how many bytes
// (at least one item), one lane may dispatch per round.
const (
	dispatchBurst      = 32
	dispatchBurstBytes = 256 << 10
)

// dispatch runs until stopping: round-robin over the lanes, up to
// dispatchBurst items or dispatchBurstBytes each per round, so a burst
// from one drone queues behind at most one burst of each other drone in
// the store's queue (which storeWindow keeps short).
func (in *Ingester) dispatch(ctx context.Context) {
	var ring []*lane
	for {
		in.lanesMu.RLock()
		ring = append(ring[:0], in.ring...)
		in.lanesMu.RUnlock()
		moved := false
		for _, l := range ring {
			select {
			case <-in.stopping:
				return
			default:
			}
			if l.held.Load() {
				continue
			}
			for k, sent := 0, int64(0); k < dispatchBurst && sent < dispatchBurstBytes; k++ {
				it, ok := l.pop()
				if !ok {
					break
				}
				sent += msgBytes(it.msg)
				in.buffered.Add(-1)
				select {
				case in.space <- struct{}{}:
				default:
				}
				moved = true
				more := in.process(ctx, l, it)
				l.done()
				if !more {
					return
				}
			}
		}
		if moved {
			continue
		}
		select {
		case <-in.wake:
		case <-in.stopping:
			return
		}
	}
}
