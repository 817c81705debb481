package telemetry

import (
	"context"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// item is one delivered message waiting in its drone's lane.
type item struct {
	msg    paho.Message
	topic  string
	recv   int64
	status bool
}

// lane is one drone's bounded FIFO between the MQTT client and the store.
// Items of one lane are dispatched in order, so a drone's events land in
// the store in delivery order.
type lane struct {
	drone, writer string
	// ch is the bounded queue (Config.LaneDepth).
	ch chan item

	// mu guards the fields below.
	mu sync.Mutex
	// pending counts appends queued in the store, not yet durable.
	pending int
	// closeReq: an offline status waits for pending to reach 0.
	closeReq bool
	// closeAcks ack the offline status messages once the writer is closed.
	closeAcks []func()
}

// laneFor returns the drone's lane, creating it; nil if MaxDrones are taken.
func (in *Ingester) laneFor(drone string) *lane {
	in.lanesMu.RLock()
	l := in.lanes[drone]
	in.lanesMu.RUnlock()
	if l != nil {
		return l
	}
	in.lanesMu.Lock()
	defer in.lanesMu.Unlock()
	if l = in.lanes[drone]; l != nil {
		return l
	}
	if len(in.lanes) >= in.cfg.MaxDrones {
		return nil
	}
	l = &lane{drone: drone, writer: WriterFor(drone), ch: make(chan item, in.cfg.LaneDepth)}
	in.lanes[drone] = l
	in.ring = append(in.ring, l)
	return l
}

// enqueue puts it into l, waiting (counted) if the lane is full. It gives
// up when the ingester stops: the message stays unacked and the broker
// redelivers it.
func (in *Ingester) enqueue(l *lane, it item) {
	select {
	case l.ch <- it:
	default:
		in.c.laneFullWaits.Add(1)
		select {
		case l.ch <- it:
		case <-in.stopping:
			return
		}
	}
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// dispatchBurst is how many items one lane may dispatch per round.
const dispatchBurst = 32

// dispatch runs until stopping: round-robin over the lanes, up to
// dispatchBurst items each per round, so a burst from one drone queues
// behind at most one burst of each other drone in the store's queue.
func (in *Ingester) dispatch(ctx context.Context) {
	defer in.wg.Done()
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
		burst:
			for k := 0; k < dispatchBurst; k++ {
				select {
				case it := <-l.ch:
					moved = true
					if !in.process(ctx, l, it) {
						return
					}
				default:
					break burst
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
