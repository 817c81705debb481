package video

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/pion/rtp"
)

// camera is a misbehaving RTSP camera for the tests: a loopback listener
// whose answers a test decides (answer), with requests parsed and answers
// written by gortsplib's own base codec. It counts the TCP connections it
// accepts and records every request's method and Authorization header.
// After a PLAY it keeps on the connection, when streams is set, sends an
// H.264 RTP packet interleaved on channel 0 every 10 ms.
type camera struct {
	ln    net.Listener
	conns atomic.Int64
	// answer returns the response to req (the CSeq is added) and whether
	// to close the connection after writing it.
	answer  func(req *base.Request) (res *base.Response, hangUp bool)
	streams atomic.Bool

	mu   sync.Mutex
	reqs []cameraRequest
}

// cameraRequest is a request the camera received.
type cameraRequest struct {
	method base.Method
	auth   string    // the Authorization header ("" if none)
	at     time.Time // when it was read
}

// startCamera listens on host (an address of the loopback, port chosen
// by the kernel) and answers with answer until the test ends.
func startCamera(t *testing.T, host string, answer func(req *base.Request) (*base.Response, bool)) *camera {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	c := &camera{ln: ln, answer: answer}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c.conns.Add(1)
			wg.Go(func() { c.serve(nc) })
		}
	})
	return c
}

// URL is the camera's rtsp:// URL of path with userinfo ("user:pass" or "").
func (c *camera) URL(userinfo, path string) string {
	if userinfo != "" {
		userinfo += "@"
	}
	return "rtsp://" + userinfo + c.ln.Addr().String() + "/" + path
}

func (c *camera) serve(nc net.Conn) {
	defer nc.Close()
	var wmu sync.Mutex
	write := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := nc.Write(b)
		return err
	}
	done := make(chan struct{})
	defer close(done)
	br := bufio.NewReader(nc)
	for {
		var req base.Request
		if err := req.Unmarshal(br); err != nil {
			return
		}
		c.mu.Lock()
		c.reqs = append(c.reqs, cameraRequest{method: req.Method, auth: firstHeader(req.Header, "Authorization"), at: time.Now()})
		c.mu.Unlock()
		res, hangUp := c.answer(&req)
		if res.Header == nil {
			res.Header = base.Header{}
		}
		res.Header["CSeq"] = req.Header["CSeq"]
		b, err := res.Marshal()
		if err != nil {
			return
		}
		if err := write(b); err != nil || hangUp {
			return
		}
		if req.Method == base.Play && res.StatusCode == base.StatusOK && c.streams.Load() {
			go streamTo(write, done)
		}
	}
}

// streamTo writes an H.264 IDR slice in an RTP packet, interleaved on
// channel 0, every 10 ms until done is closed or a write fails.
func streamTo(write func([]byte) error, done <-chan struct{}) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for seq := uint16(0); ; seq++ {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: uint32(seq) * 3000, SSRC: 0x5ca1ab1e, Marker: true},
			Payload: []byte{0x65, 0x88, 0x84, 0x00, 0x33, 0xff}}
		b, err := p.Marshal()
		if err != nil {
			return
		}
		if write(append([]byte{'$', 0, byte(len(b) >> 8), byte(len(b))}, b...)) != nil {
			return
		}
	}
}

// requests returns the requests received so far.
func (c *camera) requests() []cameraRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cameraRequest(nil), c.reqs...)
}

// of returns the requests of method received so far.
func (c *camera) of(method base.Method) []cameraRequest {
	var out []cameraRequest
	for _, r := range c.requests() {
		if r.method == method {
			out = append(out, r)
		}
	}
	return out
}

func firstHeader(h base.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ok is a 200 answer with the given headers.
func ok(h base.Header) *base.Response {
	return &base.Response{StatusCode: base.StatusOK, StatusMessage: "OK", Header: h}
}

// options answers OPTIONS as a camera that plays.
func options() *base.Response {
	return ok(base.Header{"Public": base.HeaderValue{"OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"}})
}

// cameraSDP is one H.264 video media.
const cameraSDP = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n" +
	"m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1\r\na=control:trackID=0\r\n"

// plays answers DESCRIBE, SETUP (TCP, interleaved) and PLAY of a camera
// with one H.264 media; it never sends a packet.
func plays(req *base.Request) *base.Response {
	switch req.Method {
	case base.Options:
		return options()
	case base.Describe:
		res := ok(base.Header{"Content-Type": base.HeaderValue{"application/sdp"},
			"Content-Base": base.HeaderValue{req.URL.String() + "/"}})
		res.Body = []byte(cameraSDP)
		return res
	case base.Setup:
		return ok(base.Header{"Transport": base.HeaderValue{"RTP/AVP/TCP;unicast;interleaved=0-1"},
			"Session": base.HeaderValue{"12345678;timeout=60"}})
	case base.Play, base.GetParameter, base.Teardown:
		return ok(base.Header{"Session": base.HeaderValue{"12345678"}})
	}
	return &base.Response{StatusCode: base.StatusNotImplemented, StatusMessage: "Not Implemented"}
}

// redirectTo answers DESCRIBE with 302 to loc (and OPTIONS as plays).
func redirectTo(loc func() string) func(req *base.Request) (*base.Response, bool) {
	return func(req *base.Request) (*base.Response, bool) {
		if req.Method == base.Describe {
			return &base.Response{StatusCode: base.StatusFound, StatusMessage: "Found",
				Header: base.Header{"Location": base.HeaderValue{loc()}}}, false
		}
		return plays(req), false
	}
}

// asksBasic answers DESCRIBE with 401 and a basic challenge until it gets
// credentials, then with 404.
func asksBasic(req *base.Request) (*base.Response, bool) {
	if req.Method != base.Describe {
		return plays(req), false
	}
	if firstHeader(req.Header, "Authorization") == "" {
		return &base.Response{StatusCode: base.StatusUnauthorized, StatusMessage: "Unauthorized",
			Header: base.Header{"WWW-Authenticate": base.HeaderValue{`Basic realm="cam"`}}}, false
	}
	return &base.Response{StatusCode: base.StatusNotFound, StatusMessage: "Not Found"}, false
}
