package guard

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// serveLimited accepts from a Limiter of cfg on loopback; each accepted
// connection is passed to handle on its own goroutine.
func serveLimited(t *testing.T, cfg LimiterConfig, handle func(*Conn)) *Limiter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimiter(ln, cfg)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c.(*Conn))
		}
	}()
	return l
}

// drain reads until the connection fails, then closes it.
func drain(c *Conn) {
	io.Copy(io.Discard, c)
	c.Close()
}

func dial(t *testing.T, l *Limiter) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keepSending writes a byte on c every 20 ms until the returned stop.
func keepSending(c net.Conn) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				c.Write([]byte{1})
			}
		}
	}()
	return func() { close(done) }
}

// closedByServer reports whether the server closed c (a read ends).
func closedByServer(c net.Conn, within time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestLimiterEvictsIdleForNewcomer: Max idle connections hold every slot;
// a newcomer is refused while they are fresh, and takes the slot of the
// one quiet the longest once they have been quiet for EvictAfter. A
// connection that keeps sending (ReadsAreActivity) is never the one.
func TestLimiterEvictsIdleForNewcomer(t *testing.T) {
	l := serveLimited(t, LimiterConfig{Max: 4, EvictAfter: 300 * time.Millisecond, ReadsAreActivity: true}, drain)
	busy := dial(t, l)
	defer keepSending(busy)()
	var idle []net.Conn
	for range 3 {
		idle = append(idle, dial(t, l))
	}
	testkit.WaitFor(t, 5*time.Second, "4 open", func() bool { return l.Stats().Open == 4 })
	if late := dial(t, l); !closedByServer(late, 5*time.Second) {
		t.Fatal("a fifth connection admitted while every one was fresh")
	}
	if s := l.Stats(); s.Refused != 1 {
		t.Fatalf("refusal not counted: %+v", s)
	}
	time.Sleep(350 * time.Millisecond) // the idle ones have been quiet for EvictAfter
	newcomer := dial(t, l)
	if !closedByServer(idle[0], 5*time.Second) {
		t.Fatal("the connection quiet the longest was not evicted")
	}
	if closedByServer(newcomer, 100*time.Millisecond) || closedByServer(busy, 100*time.Millisecond) {
		t.Fatal("the newcomer or the busy connection was closed")
	}
	if s := l.Stats(); s.Evicted != 1 || s.Open != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// TestLimiterReadTimeout: a connection that sends nothing for
// ReadTimeout fails its read, counted; one that keeps sending does not.
func TestLimiterReadTimeout(t *testing.T) {
	l := serveLimited(t, LimiterConfig{Max: 4, ReadTimeout: 200 * time.Millisecond}, drain)
	silent, talker := dial(t, l), dial(t, l)
	defer keepSending(talker)()
	time.Sleep(600 * time.Millisecond) // three read timeouts
	if !closedByServer(silent, 5*time.Second) {
		t.Fatal("a silent connection outlived its read deadline")
	}
	if closedByServer(talker, 50*time.Millisecond) {
		t.Fatal("a connection that kept sending timed out")
	}
	if s := l.Stats(); s.TimedOut != 1 || s.Open != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestLimiterActiveAndIdleBound: connections marked Active are never
// evicted; past MaxIdle, a newcomer evicts the oldest idle at once; past
// MaxPerSource one source is refused.
func TestLimiterActiveAndIdleBound(t *testing.T) {
	accepted := make(chan *Conn, 16)
	l := serveLimited(t, LimiterConfig{Max: 8, MaxIdle: 2, MaxPerSource: 4, EvictAfter: time.Hour},
		func(c *Conn) { accepted <- c; drain(c) })
	next := func() *Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("a connection was not accepted")
			return nil
		}
	}
	a := dial(t, l)
	next().Active()
	b := dial(t, l)
	next()
	c := dial(t, l)
	sc := next()
	d := dial(t, l) // a third idle: b, the oldest idle, goes; a is active
	sd := next()
	if !closedByServer(b, 5*time.Second) {
		t.Fatal("the oldest idle connection was not evicted past MaxIdle")
	}
	if closedByServer(a, 50*time.Millisecond) || closedByServer(c, 50*time.Millisecond) || closedByServer(d, 50*time.Millisecond) {
		t.Fatal("an active or newer idle connection was closed")
	}
	sc.Active()
	sd.Active()
	dial(t, l) // the fourth from this source
	next()
	if e := dial(t, l); !closedByServer(e, 5*time.Second) {
		t.Fatal("a fifth connection from one source admitted")
	}
	if s := l.Stats(); s.IdleEvicted != 1 || s.SourceRefused != 1 || s.Evicted != 0 || s.Open != 4 {
		t.Fatalf("stats %+v", s)
	}
}
