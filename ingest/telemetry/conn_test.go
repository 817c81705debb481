package telemetry

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// TestBufferedConnFlushesBeforeClose: bytes written just before Close —
// concurrent Closes included — reach the peer, in order.
func TestBufferedConnFlushesBeforeClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		got <- b
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := newBufferedConn(raw)
	var want bytes.Buffer
	for i := 0; i < 5000; i++ {
		p := []byte{byte(i), byte(i >> 8), 0xAB}
		want.Write(p)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("peer got %d bytes, want %d", len(b), want.Len())
	}
	if _, err := c.Write([]byte{1}); err == nil {
		t.Fatal("write after close succeeded")
	}
}
