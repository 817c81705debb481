package mavlink

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/edge-agent/edge-agent/ingest/guard"
)

// readStream takes frames from a byte stream with consume (plain frames,
// or a tlog) until it ends; a frame cut by a read waits for the rest in
// the next one.
func (in *Intake) readStream(c net.Conn, consume func([]byte, int64, source) int) {
	src := source{conn: in.newConnID()} // the connection is the source
	defer in.releaseSource(src)
	buf := make([]byte, 16<<10)
	have := 0
	for {
		n, err := c.Read(buf[have:])
		if n > 0 {
			have += n
			used := consume(buf[:have], in.cfg.Now().UnixNano(), src)
			have = copy(buf, buf[used:have]) // < 8 + maxFrameLen: the start of one entry
		}
		if err != nil {
			if have > 0 {
				in.c.garbageBytes.Add(uint64(have)) // a frame cut by the end of the stream
				in.c.truncated.Add(1)
			}
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				in.c.connectionsTimedOut.Add(1)
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				in.c.readErrors.Add(1)
			}
			return
		}
	}
}

// evictAfter: when MaxConnections are open, a newcomer takes the slot of
// the connection that has sent nothing the longest, once that has been
// quiet this long (a drone sends a HEARTBEAT every second at least).
const evictAfter = 2 * time.Second

// acceptTCP serves TCP connections until ctx ends, at most MaxConnections
// at once per listener, through a guard.Limiter: a connection that sends
// nothing for TCPIdleTimeout is cut, and when every slot is held a
// newcomer takes the slot of the one quiet the longest (quiet for
// evictAfter), else it is closed at once (counted). Idle sockets cannot
// lock a drone's link out.
func (in *Intake) acceptTCP(ctx context.Context, ln net.Listener, consume func([]byte, int64, source) int) {
	l := guard.NewLimiter(ln, guard.LimiterConfig{
		Max: in.cfg.MaxConnections, EvictAfter: evictAfter, ReadTimeout: in.cfg.TCPIdleTimeout,
		ReadsAreActivity: true, Now: in.cfg.Now,
		OnRefuse: func(guard.Refusal, string) { in.c.connectionsRefused.Add(1) },
		OnEvict:  func(bool) { in.c.connectionsEvicted.Add(1) },
	})
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	var wg sync.WaitGroup
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			in.c.readErrors.Add(1)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		in.c.connections.Add(1)
		wg.Go(func() {
			in.readStream(c, consume)
			c.Close()
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		})
	}
}

// dialTCP is a client of a TCP server endpoint: it reads from it,
// redialling with a backoff from 100 ms to 5 s after every loss, until ctx ends.
func (in *Intake) dialTCP(ctx context.Context, addr string) {
	backoff := 100 * time.Millisecond
	var d net.Dialer
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			in.c.connections.Add(1)
			backoff = 100 * time.Millisecond
			stop := context.AfterFunc(ctx, func() { c.Close() })
			in.readStream(c, in.consume)
			stop()
			c.Close()
			in.c.connectionsLost.Add(1)
		} else if ctx.Err() == nil {
			in.c.readErrors.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
