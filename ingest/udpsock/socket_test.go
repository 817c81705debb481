package udpsock

import (
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// TestKernelDropsCounted: datagrams sent to a socket whose small buffer
// is full are dropped by the kernel, and the next datagram queued after
// them carries how many (those queued before carry none).
func TestKernelDropsCounted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_RXQ_OVFL is Linux's")
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	granted := Tune(c, 4096) // the kernel's least, a few datagrams
	if granted <= 0 {
		t.Fatalf("granted buffer %d", granted)
	}
	s, err := net.DialUDP("udp", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const sent = 200
	for range sent { // nobody reads: the buffer fills, the rest is dropped
		if _, err := s.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := []ipv4.Message{{Buffers: [][]byte{make([]byte, 2048)}, OOB: make([]byte, 64)}}
	var read int64
	last := int64(-1)
	c.SetReadDeadline(timeSoon())
	for {
		n, err := ipv4.NewPacketConn(c).ReadBatch(msgs, 0)
		if err != nil || n == 0 {
			break
		}
		read++
		last = KernelDrops(msgs[0].OOB[:msgs[0].NN])
	}
	if last != -1 {
		t.Fatalf("datagrams queued before any drop carry a count: %d", last)
	}
	// The count rides on datagrams queued after the drops.
	if _, err := s.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(timeSoon())
	if _, err := ipv4.NewPacketConn(c).ReadBatch(msgs, 0); err != nil {
		t.Fatal(err)
	}
	last = KernelDrops(msgs[0].OOB[:msgs[0].NN])
	if last <= 0 || read+last != sent {
		t.Fatalf("read %d datagrams, kernel drops %d: want drops > 0 and read + drops = %d (buffer %d)", read, last, sent, granted)
	}
	t.Logf("buffer %d: %d read, %d dropped by the kernel", granted, read, last)
}

func timeSoon() time.Time { return time.Now().Add(200 * time.Millisecond) }
