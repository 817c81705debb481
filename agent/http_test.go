package agent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestHTTPConnectionBounds: 200 keep-alive clients that stay idle hold at
// most maxHTTPConns server connections at once, every one of them is
// served in the end, and idle connections are closed after the idle
// timeout (shortened here).
func TestHTTPConnectionBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Connections are counted beneath the limit, where they are accepted
	// and closed: the limit gives a slot back only after the close
	// (counting in ConnState saw the next StateNew before the last
	// StateClosed, 65 at once, on a loaded machine).
	cl := &countingListener{Listener: ln}
	open, peak := &cl.open, &cl.peak
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	srv.IdleTimeout = 300 * time.Millisecond
	srv.Handler, srv.ConnContext = serving(srv.Handler), connContext
	go srv.Serve(newConnLimiter(cl, maxHTTPConns))
	defer srv.Close()
	const clients = 200
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			buf := make([]byte, 256)
			if _, err := c.Read(buf); err != nil {
				errs <- fmt.Errorf("no response: %w", err)
				return
			}
			// Stay idle on the keep-alive connection: the server must close it.
			if _, err := io.ReadAll(c); err != nil {
				errs <- fmt.Errorf("idle connection not closed by the server: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > maxHTTPConns {
		t.Fatalf("%d connections open at once (max %d)", p, maxHTTPConns)
	}
	testkit.Until(10*time.Second, func() bool { return open.Load() == 0 })
	if n := open.Load(); n != 0 {
		t.Fatalf("%d connections still open", n)
	}
	if srv.MaxHeaderBytes != httpMaxHeaderBytes || srv.ReadHeaderTimeout == 0 {
		t.Fatalf("server unbounded: %+v", srv)
	}
}

// countingListener counts the connections it accepted that are not closed
// yet, and their peak.
type countingListener struct {
	net.Listener
	open, peak atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

// countedConn gives its count back once, at its first Close.
type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
