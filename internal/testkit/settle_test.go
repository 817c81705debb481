package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

// Settle returns once the count stopped moving, not before; a count that
// never stops moving is reported.
func TestSettle(t *testing.T) {
	var n atomic.Uint64
	stop := make(chan struct{})
	go func() {
		for range 20 {
			n.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
	}()
	// Quiet far longer than a step, even on a loaded machine.
	if !Settle(500*time.Millisecond, 10*time.Second, n.Load) {
		t.Fatal("a count that stopped did not settle")
	}
	<-stop
	if n.Load() != 20 {
		t.Fatalf("settled at %d of 20", n.Load())
	}
	var m atomic.Uint64
	if Settle(100*time.Millisecond, 300*time.Millisecond, func() uint64 { return m.Add(1) }) {
		t.Fatal("a count that always moves settled")
	}
}
