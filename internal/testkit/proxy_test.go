package testkit

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every connection on a loopback port until the test ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// The proxy forwards both ways and counts the bytes; DropUp swallows what
// the client sends; Reset breaks the connection with a reset and counts
// the cut; while down it refuses connections; a Chunk hook rewrites and cuts.
func TestProxy(t *testing.T) {
	target := echoServer(t)
	p := NewProxy(t, target, ProxyHooks{})
	c := dial(t, p.Addr())
	echo(t, c, "hello")
	// Counted once written: the echo may be read before its count.
	if !Until(10*time.Second, func() bool { up, down := p.Bytes(); return up == 5 && down == 5 }) || p.Accepted() != 1 {
		up, down := p.Bytes()
		t.Fatalf("bytes %d up, %d down, %d accepted", up, down, p.Accepted())
	}

	p.DropUp(true)
	c.Write([]byte("lost"))
	WaitFor(t, 10*time.Second, "the chunk dropped", func() bool { return p.Dropped() == 1 })
	p.DropUp(false)
	echo(t, c, "back") // "lost" never reached the echo server

	p.Reset()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: %v, want a connection reset", err)
	}
	if p.Cuts() != 1 {
		t.Fatalf("%d cuts", p.Cuts())
	}
	p.Cut() // nothing open: not a cut
	if p.Cuts() != 1 {
		t.Fatalf("a cut with nothing open counted: %d", p.Cuts())
	}

	p.SetDown(true)
	if _, err := dial(t, p.Addr()).Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection through a link that is down was served")
	}
	if p.Refused() != 1 {
		t.Fatalf("%d refused", p.Refused())
	}
	p.SetDown(false)
	echo(t, dial(t, p.Addr()), "up")

	hooked := NewProxy(t, target, ProxyHooks{Chunk: func(up bool, b []byte) ([]byte, bool) {
		if up {
			return bytes.ToUpper(b), bytes.Contains(b, []byte("bye"))
		}
		return b, false
	}})
	c = dial(t, hooked.Addr())
	if _, err := c.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ABC" {
		t.Fatalf("through the hook: %q, %v", got, err)
	}
	c.Write([]byte("bye"))
	// The hook cuts after forwarding: the connection ends (whether the
	// echo of "BYE" came back first or not), it does not time out.
	rest, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || len(rest) > 0 && string(rest) != "BYE" {
		t.Fatalf("after the cutting chunk: %q, %v", rest, err)
	}
}
