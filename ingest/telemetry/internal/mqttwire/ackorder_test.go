package mqttwire

import (
	"slices"
	"testing"
)

// TestAckOrder: acks released in any order are sent in numbering order,
// each once, and none before every earlier one was released.
func TestAckOrder(t *testing.T) {
	var o AckOrder[PubAck]
	var sent []uint16
	send := func(a PubAck) { sent = append(sent, a.ID) }
	ns := make([]uint64, 6)
	for i := range ns {
		ns[i] = o.Number()
	}
	for _, i := range []int{0, 2, 1, 5, 4} {
		o.Release(ns[i], PubAck{ID: uint16(i), QoS: 1}, send)
	}
	if want := []uint16{0, 1, 2}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v (3 holds back 4 and 5)", sent, want)
	}
	o.Release(ns[3], PubAck{ID: 3, QoS: 1}, send)
	if want := []uint16{0, 1, 2, 3, 4, 5}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	if len(o.held) != 0 {
		t.Fatalf("%d acks still held", len(o.held))
	}
}
