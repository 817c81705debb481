package telemetry

import (
	"errors"
	"testing"
)

func TestDedupRoundTrip(t *testing.T) {
	h := hashMessage("drones/a/telemetry", []byte(`{"seq":1}`))
	got, err := decodeDedup(encodeDedup(h))
	if err != nil || got != h {
		t.Fatalf("%v %v", got, err)
	}
	if hashMessage("drones/b/telemetry", []byte(`{"seq":1}`)) == h {
		t.Fatal("topic not in hash")
	}
	for _, b := range [][]byte{nil, {1}, append([]byte{2}, h[:]...)} {
		if _, err := decodeDedup(b); !errors.Is(err, ErrCorruptDedup) {
			t.Fatalf("%x: %v", b, err)
		}
	}
}

func TestDedupTablePendingWaiters(t *testing.T) {
	var tab dedupTable
	h := hashMessage("t", []byte("x"))
	if dup, _ := tab.check(7, h, nil); dup {
		t.Fatal("empty table reports duplicate")
	}
	tab.begin(7, h)
	acked := 0
	dup, deferred := tab.check(7, h, func() { acked++ })
	if !dup || !deferred {
		t.Fatal("pending redelivery not deferred")
	}
	for _, f := range tab.done(7, h) {
		f()
	}
	if acked != 1 {
		t.Fatal("waiter not returned")
	}
	if dup, deferred := tab.check(7, h, nil); !dup || deferred {
		t.Fatal("durable entry")
	}
	if dup, _ := tab.check(7, hashMessage("t", []byte("y")), nil); dup {
		t.Fatal("different payload reported duplicate")
	}
}

func FuzzDecodeDedup(f *testing.F) {
	f.Add(encodeDedup(hashMessage("a", []byte("b"))))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeDedup(b)
		if err == nil && string(encodeDedup(h)) != string(b) {
			t.Fatal("no round trip")
		}
	})
}
