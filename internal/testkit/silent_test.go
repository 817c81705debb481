package testkit

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A silent server takes the connection and the request, and answers
// nothing: the client's read times out.
func TestSilentServer(t *testing.T) {
	c, err := net.Dial("tcp", SilentServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("OPTIONS rtsp://x/ RTSP/1.0\r\nCSeq: 1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var ne net.Error
	if n, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes, %v: want a timeout, nothing answered", n, err)
	}
}
