package telemetry

// ackOrder numbers one connection's messages in delivery order and sends
// their PUBACKs in that order. The store calls back in append order, which
// is not delivery order (the lanes take turns), but MQTT 3.1.1 4.6.0-2
// wants PUBACKs in delivery order, and Mosquitto 2.0 needs it: PUBACKed
// out of order, it let a newly published message overtake the ones it had
// queued for us, and a drone's telemetry landed out of order. A message
// never acked in this run (left unacked at a stop) holds back the PUBACKs
// of later ones: the sender sends them again to the next run with DUP set
// and the dedup entries skip them.
//
// T is what an ack needs: the broker client's connection and message
// (brokerAck), or a listener connection's packet id and QoS (pubAck),
// which a held ack keeps without a closure per message.
type ackOrder[T any] struct {
	// delivered numbers the messages (the delivering goroutine only, with
	// Ingester.deliverMu held).
	delivered uint64
	// next is the number of the next PUBACK to send and held the acks
	// ready before it (the acker goroutine only).
	next uint64
	held map[uint64]T
}

// number numbers the next message delivered. Called with
// Ingester.deliverMu held.
func (o *ackOrder[T]) number() uint64 {
	n := o.delivered
	o.delivered++
	return n
}

// release records that message n may be acked with a and sends (with
// send) every ack now due, in order. Called on the acker goroutine only.
func (o *ackOrder[T]) release(n uint64, a T, send func(T)) {
	if n == o.next && len(o.held) == 0 {
		o.next++
		send(a)
		return
	}
	if o.held == nil {
		o.held = map[uint64]T{}
	}
	o.held[n] = a
	for {
		a, ok := o.held[o.next]
		if !ok {
			return
		}
		delete(o.held, o.next)
		o.next++
		send(a)
	}
}
