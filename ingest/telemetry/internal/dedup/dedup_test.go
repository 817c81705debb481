package dedup

import (
	"errors"
	"testing"
)

func TestDedupRoundTrip(t *testing.T) {
	h := HashMessage("drones/a/telemetry", []byte(`{"seq":1}`))
	got, err := Decode(Encode(h))
	if err != nil || got != h {
		t.Fatalf("%v %v", got, err)
	}
	if HashMessage("drones/b/telemetry", []byte(`{"seq":1}`)) == h {
		t.Fatal("topic not in hash")
	}
	for _, b := range [][]byte{nil, {1}, append([]byte{2}, h[:]...)} {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%x: %v", b, err)
		}
	}
}

func TestDedupTablePendingWaiters(t *testing.T) {
	var tab Table
	h := HashMessage("t", []byte("x"))
	if dup, _ := tab.Check(7, h, nil); dup {
		t.Fatal("empty table reports duplicate")
	}
	tab.Begin(7, h)
	acked := 0
	dup, deferred := tab.Check(7, h, func() { acked++ })
	if !dup || !deferred {
		t.Fatal("pending redelivery not deferred")
	}
	for _, f := range tab.Done(7, h) {
		f()
	}
	if acked != 1 {
		t.Fatal("waiter not returned")
	}
	if dup, deferred := tab.Check(7, h, nil); !dup || deferred {
		t.Fatal("durable entry")
	}
	if dup, _ := tab.Check(7, HashMessage("t", []byte("y")), nil); dup {
		t.Fatal("different payload reported duplicate")
	}
}

func FuzzDecodeDedup(f *testing.F) {
	f.Add(Encode(HashMessage("a", []byte("b"))))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err == nil && string(Encode(h)) != string(b) {
			t.Fatal("no round trip")
		}
	})
}
