package udpsock

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestReaderBatches: datagrams come back whole, in order, in batches of
// at most the batch size; a closed socket ends Read.
func TestReaderBatches(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		s.Write([]byte{byte(i), 1, 2})
	}
	r := NewReader(c, 2, 16)
	var got []byte
	for len(got) < 5 {
		msgs, ok := r.Read(nil, time.Millisecond, nil)
		if !ok || len(msgs) == 0 || len(msgs) > 2 {
			t.Fatalf("batch of %d, ok %v", len(msgs), ok)
		}
		for _, m := range msgs {
			if m.N != 3 {
				t.Fatalf("datagram of %d bytes", m.N)
			}
			got = append(got, m.Buffers[0][0])
		}
	}
	if string(got) != "\x00\x01\x02\x03\x04" {
		t.Fatalf("got %v", got)
	}
	c.Close()
	if _, ok := r.Read(nil, time.Millisecond, nil); ok {
		t.Fatal("read on a closed socket")
	}
}

// TestReaderTransientErrors: a connected socket's ICMP error (nothing
// listens) is told to onError and the read goes on, until the socket is
// closed (as the intakes stop their readers).
func TestReaderTransientErrors(t *testing.T) {
	l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dead := l.LocalAddr().(*net.UDPAddr)
	l.Close()
	c, err := net.DialUDP("udp4", nil, dead)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var errs atomic.Int64
	done := make(chan bool)
	go func() {
		_, ok := NewReader(c, 4, 16).Read(nil, time.Millisecond, func(error) {
			if errs.Add(1) == 1 {
				c.Close()
			}
		})
		done <- ok
	}()
	c.Write([]byte("x")) // refused: the next read reports it
	select {
	case ok := <-done:
		if ok || errs.Load() == 0 {
			t.Fatalf("ok %v after %d errors", ok, errs.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the error did not reach onError")
	}
}
