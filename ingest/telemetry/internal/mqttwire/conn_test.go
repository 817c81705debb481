package mqttwire

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
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
	c := NewBufferedConn(raw)
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

// TestServerConnCloseKeepsLastAcks: a server connection closed with input
// it never read — a publisher that sent more than a stopping agent read —
// still delivers what was written just before the close. A plain close
// made the kernel answer with a reset, and the client lost the last acks
// (fails without lingeringClose: "the client read 92 of 256 bytes";
// TestListenerStopAcksWhatIsStored failed the same way once the acks of a
// stop went out at the stop).
func TestServerConnCloseKeepsLastAcks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for round := range 4 {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		// The client sends 256 KiB the server never reads.
		sent := make(chan error, 1)
		go func() {
			_, err := client.Write(make([]byte, 256<<10))
			sent <- err
		}()
		c := NewServerConn(raw)
		closed := make(chan struct{})
		buf := make([]byte, 1024)
		if _, err := io.ReadFull(c, buf); err != nil { // the input is there
			t.Fatal(err)
		}
		// The client reads once the server closed: what it is sent
		// waits in its socket meanwhile.
		read := make(chan []byte, 1)
		go func() {
			<-closed
			client.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, _ := io.ReadAll(client)
			client.Close()
			read <- got
		}()
		// Acks in separate writes, as they go out one commit at a time:
		// the last small segments are still queued in the kernel when
		// the connection closes.
		var want []byte
		for i := range 64 {
			a := []byte{0x40, 2, byte(round), byte(i)}
			want = append(want, a...)
			if _, err := c.Write(a); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Microsecond) // spaces the writes into separate segments: the test's intent
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		close(closed)
		if got := <-read; !bytes.Equal(got, want) {
			t.Fatalf("round %d: the client read %d of %d bytes", round, len(got), len(want))
		}
		<-sent
	}
}
