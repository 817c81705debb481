package testkit

import (
	"net"
	"testing"
	"time"
)

// UDPQueue sees a socket's buffer fill, drop, and drain.
func TestUDPQueue(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadBuffer(4096)
	addr := c.LocalAddr().(*net.UDPAddr)
	s, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 100 {
		s.Write(make([]byte, 1000))
	}
	WaitFor(t, 10*time.Second, "drops", func() bool { q, d := UDPQueue(t, addr); return q > 0 && d > 0 })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	WaitFor(t, 10*time.Second, "the buffer read", func() bool {
		if q, _ := UDPQueue(t, addr); q == 0 {
			return true
		}
		_, err := c.Read(make([]byte, 2048))
		return err != nil
	})
	if q, _ := UDPQueue(t, addr); q != 0 {
		t.Fatalf("%d bytes queued after reading all", q)
	}
}
