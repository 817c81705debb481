package live

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// linkProxy is the uplink in these tests: a TCP proxy between the agent
// and the centre that can cap the client→server byte rate (a 2 Mbit/s
// link), go down (refusing and cutting connections), and measures the
// client→server bytes by what they carry — it parses the NATS protocol
// (PUB/HPUB frames) and counts each frame's bytes as live (a subject
// under "edgelive.") or other.
type linkProxy struct {
	ln     net.Listener
	target string
	lim    *rate.Limiter // nil: uncapped

	down atomic.Bool

	// liveBytes and otherBytes count client→server bytes by class;
	// liveMsgs the live frames.
	liveBytes, otherBytes, liveMsgs atomic.Int64
	cuts                            atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// samples are (time, live bytes, other bytes) taken at every frame,
	// for windowed rates. Guarded by mu.
	samples []byteSample
	wg      sync.WaitGroup
}

type byteSample struct {
	at          time.Time
	live, other int64
}

// newLinkProxy proxies to target; bytesPerSec > 0 caps the uplink.
func newLinkProxy(t testing.TB, target string, bytesPerSec int) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	if bytesPerSec > 0 {
		// A small burst: the link never runs ahead of its rate by more
		// than 4 KiB (about 16 ms at 2 Mbit/s).
		p.lim = rate.NewLimiter(rate.Limit(bytesPerSec), 4<<10)
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.up(c, s)
		go p.downlink(s, c)
	}
}

// up forwards client→server at the link's rate, classifying frames.
func (p *linkProxy) up(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() { src.Close(); dst.Close() }()
	br := bufio.NewReaderSize(src, 64<<10)
	for {
		frame, live, err := readFrame(br)
		if len(frame) > 0 {
			for off := 0; off < len(frame); {
				k := min(len(frame)-off, 4<<10)
				if p.lim != nil {
					if p.lim.WaitN(context.Background(), k) != nil {
						return
					}
				}
				if _, werr := dst.Write(frame[off : off+k]); werr != nil {
					return
				}
				off += k
			}
			if live {
				p.liveBytes.Add(int64(len(frame)))
				p.liveMsgs.Add(1)
			} else {
				p.otherBytes.Add(int64(len(frame)))
			}
			p.mu.Lock()
			p.samples = append(p.samples, byteSample{at: time.Now(), live: p.liveBytes.Load(), other: p.otherBytes.Load()})
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// readFrame reads one protocol line, and for PUB/HPUB its payload: the
// frame's bytes and whether it is a live publish.
func readFrame(br *bufio.Reader) ([]byte, bool, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return append([]byte(nil), line...), false, nil // not NATS client protocol (a leaf's LMSG payload)
	}
	if err != nil {
		return append([]byte(nil), line...), false, err
	}
	frame := append([]byte(nil), line...)
	f := bytes.Fields(line)
	if len(f) < 3 {
		return frame, false, nil
	}
	var n int
	switch string(bytes.ToUpper(f[0])) {
	case "PUB", "HPUB":
		n, err = strconv.Atoi(string(f[len(f)-1]))
		if err != nil {
			return frame, false, nil
		}
	default:
		return frame, false, nil
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(br, body); err != nil {
		return frame, false, err
	}
	return append(frame, body...), bytes.HasPrefix(f[1], []byte(subjectPrefix)), nil
}

// downlink forwards server→client unchanged.
func (p *linkProxy) downlink(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() { src.Close(); dst.Close() }()
	io.Copy(dst, src)
}

// setDown takes the link down (cutting every connection) or up.
func (p *linkProxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.cutAll()
	}
}

func (p *linkProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	if len(p.conns) > 0 {
		p.cuts.Add(1)
	}
	p.conns = map[net.Conn]struct{}{}
}

// window returns the live and other bytes forwarded in [from, to].
func (p *linkProxy) window(from, to time.Time) (live, other int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var a, b byteSample
	for _, s := range p.samples {
		if !s.at.After(from) {
			a = s
		}
		if !s.at.After(to) {
			b = s
		}
	}
	return b.live - a.live, b.other - a.other
}

// lastFrame is when the last client→server frame of more than n bytes
// was forwarded, at or before to.
func (p *linkProxy) lastFrame(n int64, to time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var at time.Time
	var prev byteSample
	for _, s := range p.samples {
		if s.at.After(to) {
			break
		}
		if s.live+s.other-prev.live-prev.other > n {
			at = s.at
		}
		prev = s
	}
	return at
}

func (p *linkProxy) close() {
	p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}
