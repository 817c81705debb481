package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// A message from the broker that a full drone table refuses (see
// Ingester.refuse) is acknowledged and dropped: a loss by policy. Rule 2
// of docs/design.md wants such a loss explicit in the stream, so the
// refused messages are written as gap markers (FlagGap, writer
// RefusedWriter, a JSON RefusedGap), and a refused message is acked only
// once the marker that counts it is durable — a crash before that leaves
// it unacked, and the broker delivers it again.
//
// The markers are coalesced and bounded: a round writes one marker per
// refused drone (routing key the drone id, so that a reader of that drone
// sees its gap) for the first maxRefusedKeys drones refused since the last
// round, and one summary marker (routing key RefusedKey, which no drone
// id can be: ids are one topic level, and it holds a '/') for the rest,
// with their count (up to maxRefusedCounted distinct ids) and the first
// maxRefusedKeys of them. A round starts when a refusal comes, at most one
// every refusedEvery: a host publishing to thousands of new ids a second
// costs at most (maxRefusedKeys + 1) markers per refusedEvery. Refused
// QoS 1 acks wait for their round (at most refusedEvery and a commit):
// meanwhile the acks of later messages wait behind them (ackOrder).
//
// Refusals on the listener are not lost (no PUBACK: the publisher keeps
// the message) and write no marker; QoS 0 refusals from the broker are
// counted in the markers too, and hold nothing back: there is no PUBACK
// to wait for, and their place in the ack order is given up at once.

const (
	// RefusedWriter is the writer of the refused messages' gap markers.
	RefusedWriter = "telemetry/refused"
	// RefusedKey is the routing key of a round's summary marker.
	RefusedKey = "telemetry/refused"
	// RefusedReason is the reason of every refused messages' marker.
	RefusedReason = "max_drones"
)

const (
	// maxRefusedKeys is how many drones a round writes a marker of their
	// own for, and how many ids a summary names.
	maxRefusedKeys = 16
	// maxRefusedCounted bounds the distinct ids a summary counts.
	maxRefusedCounted = 1024
)

// refusedEvery is the least time between two rounds (a variable for
// tests).
var refusedEvery = 100 * time.Millisecond

// RefusedGap is the payload (JSON) of a refused messages' gap marker: the
// messages of new drones refused while max_drones drones held a slot,
// acknowledged to the broker and not stored.
type RefusedGap struct {
	// Reason is RefusedReason.
	Reason string `json:"reason"`
	// Drones is how many distinct drone ids the marker covers: 1 for a
	// drone's own marker; for a summary, up to maxRefusedCounted (1,024),
	// counted no further.
	Drones uint64 `json:"drones"`
	// Events and Bytes count the refused messages and their payload bytes.
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
	// FirstReceiveNs and LastReceiveNs are when the first and the last of
	// them were received (Unix ns).
	FirstReceiveNs int64 `json:"first_receive_ns"`
	LastReceiveNs  int64 `json:"last_receive_ns"`
	// MaxDrones is the drone table's size when they were refused.
	MaxDrones int `json:"max_drones"`
	// IDs names the first drones of a summary (at most 16).
	IDs []string `json:"ids,omitempty"`
}

// add counts one refused message received at recv.
func (g *RefusedGap) add(bytes int, recv int64) {
	if g.Events == 0 || recv < g.FirstReceiveNs {
		g.FirstReceiveNs = recv
	}
	g.LastReceiveNs = max(g.LastReceiveNs, recv)
	g.Events++
	g.Bytes += uint64(bytes)
}

// refusals holds what the next round writes.
type refusals struct {
	mu sync.Mutex
	// keys holds the drones with a marker of their own, in order.
	keys  map[string]*RefusedGap
	order []string
	// other is the summary of the rest; otherIDs its distinct ids (up to
	// maxRefusedCounted).
	other    RefusedGap
	otherIDs map[string]struct{}
	// acks are the refused messages' acks, sent once the round is durable.
	acks []func()
	// due nudges writeRefusals (capacity 1).
	due chan struct{}
	// markers counts the markers written (Stats.RefusedMarkers).
	markers atomic.Uint64
}

// noteRefused records a refused broker message of drone (its payload
// bytes, its receive time and its ack: nil for QoS 0) for the next round.
// Called with in.deliverMu held; it never waits.
func (in *Ingester) noteRefused(drone string, bytes int, recv int64, ack func()) {
	r := &in.refusals
	r.mu.Lock()
	g := r.keys[drone]
	if g == nil && len(r.order) < maxRefusedKeys {
		if r.keys == nil {
			r.keys = map[string]*RefusedGap{}
		}
		g = &RefusedGap{Drones: 1}
		r.keys[drone] = g
		r.order = append(r.order, drone)
	}
	if g == nil {
		g = &r.other
		if r.otherIDs == nil {
			r.otherIDs = map[string]struct{}{}
		}
		if _, seen := r.otherIDs[drone]; !seen && len(r.otherIDs) < maxRefusedCounted {
			r.otherIDs[drone] = struct{}{}
			if len(g.IDs) < maxRefusedKeys {
				g.IDs = append(g.IDs, drone)
			}
		}
	}
	g.add(bytes, recv)
	if ack != nil {
		r.acks = append(r.acks, ack)
	}
	r.mu.Unlock()
	select {
	case r.due <- struct{}{}:
	default:
	}
}

// writeRefusals writes a round of markers when refusals come, at most one
// round every refusedEvery, until Run stops (then a last round).
func (in *Ingester) writeRefusals(ctx context.Context) {
	r := &in.refusals
	for {
		select {
		case <-r.due:
		case <-in.stopping:
			in.refusedRound(ctx)
			return
		}
		in.refusedRound(ctx)
		select {
		case <-time.After(refusedEvery):
		case <-in.stopping:
		}
	}
}

// refusedRound appends the markers of the refusals noted since the last
// round and acks their messages once every marker is durable. A stop
// that interrupts it leaves them unacked (the broker delivers them again).
func (in *Ingester) refusedRound(ctx context.Context) {
	r := &in.refusals
	r.mu.Lock()
	keys, order, other, otherIDs, acks := r.keys, r.order, r.other, len(r.otherIDs), r.acks
	r.keys, r.order, r.other, r.otherIDs, r.acks = nil, nil, RefusedGap{}, nil, nil
	r.mu.Unlock()
	if len(order) == 0 {
		return
	}
	type marker struct {
		key string
		g   *RefusedGap
	}
	ms := make([]marker, 0, len(order)+1)
	for _, d := range order {
		ms = append(ms, marker{d, keys[d]})
	}
	if other.Events > 0 {
		other.Drones = uint64(otherIDs)
		ms = append(ms, marker{RefusedKey, &other})
	}
	now := in.cfg.Now().UnixNano()
	var left atomic.Int64
	left.Store(int64(len(ms)))
	for _, m := range ms {
		m.g.Reason, m.g.MaxDrones = RefusedReason, in.cfg.MaxDrones
		payload, err := json.Marshal(m.g)
		if err != nil {
			in.fail(err)
			return
		}
		ev := localstream.Event{RoutingKey: m.key, Writer: RefusedWriter, EventTime: m.g.FirstReceiveNs, IngestTime: now,
			Flags: localstream.FlagGap | localstream.FlagEstimatedTime, ContentType: ContentTypeJSON, Payload: payload}
		in.inflight.Add(1)
		cb := func(_ localstream.Position, err error) {
			defer in.inflight.Done()
			if err != nil {
				in.fail(err)
				return
			}
			r.markers.Add(1)
			if left.Add(-1) == 0 {
				for _, a := range acks {
					in.ack(a)
				}
			}
		}
		if err := in.appendWaitingForSpace(ctx, ev, cb); err != nil {
			in.inflight.Done()
			if ctx.Err() == nil && !errors.Is(err, errStopping) {
				in.fail(err)
			}
			return // unacknowledged: the broker delivers them again
		}
	}
}
