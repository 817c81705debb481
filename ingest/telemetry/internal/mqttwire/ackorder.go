package mqttwire

// AckOrder numbers one connection's messages in delivery order and sends
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
// (the telemetry package's brokerAck), or a listener connection's packet id
// and QoS (PubAck),
// which a held ack keeps without a closure per message.
type AckOrder[T any] struct {
	// delivered numbers the messages (one goroutine at a time: the
	// connection's delivering goroutine).
	delivered uint64
	// next is the number of the next PUBACK to send and held the acks
	// ready before it (the acker goroutine only).
	next uint64
	held map[uint64]T
}

// Number numbers the next message delivered, in delivery order. Called by
// one goroutine at a time.
func (o *AckOrder[T]) Number() uint64 {
	n := o.delivered
	o.delivered++
	return n
}

// Release records that message n may be acked with a and sends (with
// send) every ack now due, in order. Called on the acker goroutine only.
func (o *AckOrder[T]) Release(n uint64, a T, send func(T)) {
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
