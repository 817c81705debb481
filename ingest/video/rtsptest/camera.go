package rtsptest

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/pion/rtp"
)

// Camera is a scripted RTSP camera, misbehaving as a test decides: a
// loopback listener whose answers the test's function gives, with
// requests parsed and answers written by gortsplib's own base codec. It
// counts the TCP connections it accepts and records every request's
// method and Authorization header. After a PLAY answered 200 it keeps on
// the connection, once Stream was called, sending numbered H.264 frames
// (FrameNAL) interleaved on channel 0 every 10 ms.
type Camera struct {
	ln net.Listener
	// Conns counts the TCP connections accepted.
	Conns atomic.Int64
	// answer returns the response to req (the CSeq is added) and whether
	// to close the connection after writing it.
	answer func(req *base.Request) (res *base.Response, hangUp bool)

	mu      sync.Mutex
	reqs    []Request
	streams bool
	// sent, if set, is told each frame's index and send time.
	sent func(i int, at time.Time)
}

// Request is a request the camera received.
type Request struct {
	Method base.Method
	Auth   string    // the Authorization header ("" if none)
	At     time.Time // when it was read
}

// StartCamera listens on host (an address of the loopback, port chosen
// by the kernel) and answers with answer until the test ends.
func StartCamera(t testing.TB, host string, answer func(req *base.Request) (*base.Response, bool)) *Camera {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Camera{ln: ln, answer: answer}
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
			c.Conns.Add(1)
			wg.Go(func() { c.serve(nc) })
		}
	})
	return c
}

// Stream makes the camera send frames after each PLAY from now on,
// telling sent (if not nil) each frame's index and send time.
func (c *Camera) Stream(sent func(i int, at time.Time)) {
	c.mu.Lock()
	c.streams, c.sent = true, sent
	c.mu.Unlock()
}

// URL is the camera's rtsp:// URL of path with userinfo ("user:pass" or "").
func (c *Camera) URL(userinfo, path string) string {
	if userinfo != "" {
		userinfo += "@"
	}
	return "rtsp://" + userinfo + c.ln.Addr().String() + "/" + path
}

func (c *Camera) serve(nc net.Conn) {
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
		c.reqs = append(c.reqs, Request{Method: req.Method, Auth: firstHeader(req.Header, "Authorization"), At: time.Now()})
		streams, sent := c.streams, c.sent
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
		if req.Method == base.Play && res.StatusCode == base.StatusOK && streams {
			go streamTo(write, done, sent)
		}
	}
}

// streamTo writes frame after frame (FrameNAL), each in one RTP packet
// interleaved on channel 0, every 10 ms until done is closed or a write
// fails.
func streamTo(write func([]byte) error, done <-chan struct{}, sent func(int, time.Time)) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: uint16(i), Timestamp: uint32(i) * 3000, SSRC: 0x5ca1ab1e, Marker: true},
			Payload: FrameNAL(i)}
		b, err := p.Marshal()
		if err != nil {
			return
		}
		at := time.Now()
		if write(append([]byte{'$', 0, byte(len(b) >> 8), byte(len(b))}, b...)) != nil {
			return
		}
		if sent != nil {
			sent(i, at)
		}
	}
}

// frameMark follows the NAL header of a numbered frame: a slice's first
// bytes, then "IX" and the index.
var frameMark = []byte{0x88, 0x84, 'I', 'X'}

// FrameGOP: every FrameGOP-th numbered frame (0 first) is a keyframe.
const FrameGOP = 30

// FrameNAL is numbered frame i (0 to 2^28-1): an H.264 slice NAL — an IDR
// slice (a keyframe, with no parameter sets) every FrameGOP frames, else
// a non-IDR one — whose bytes carry i, so that a test finds each frame
// stored (FrameIndex) and sees any lost, repeated or out of order. The
// index takes 7 bits a byte, the top bit set: no zero byte, so no start
// code can appear inside the NAL.
func FrameNAL(i int) []byte {
	hdr := byte(0x41) // non-IDR slice
	if i%FrameGOP == 0 {
		hdr = 0x65 // IDR slice
	}
	b := append([]byte{hdr}, frameMark...)
	for shift := 21; shift >= 0; shift -= 7 {
		b = append(b, 0x80|byte(i>>shift)&0x7f)
	}
	return b
}

// FrameIndex returns the index of the numbered frame in b (a stored
// frame: its start code and NAL), if it holds one.
func FrameIndex(b []byte) (int, bool) {
	k := bytes.Index(b, frameMark)
	if k < 0 || len(b) < k+len(frameMark)+4 {
		return 0, false
	}
	i := 0
	for _, c := range b[k+len(frameMark) : k+len(frameMark)+4] {
		i = i<<7 | int(c&0x7f)
	}
	return i, true
}

// Requests returns the requests received so far.
func (c *Camera) Requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.reqs...)
}

// Of returns the requests of method received so far.
func (c *Camera) Of(method base.Method) []Request {
	var out []Request
	for _, r := range c.Requests() {
		if r.Method == method {
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

// OK is a 200 answer with the given headers.
func OK(h base.Header) *base.Response {
	return &base.Response{StatusCode: base.StatusOK, StatusMessage: "OK", Header: h}
}

// cameraSDP is one H.264 video media.
const cameraSDP = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n" +
	"m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1\r\na=control:trackID=0\r\n"

// Plays answers OPTIONS, DESCRIBE, SETUP (TCP, interleaved) and PLAY as
// a camera with one H.264 media; it sends no packet itself (Stream).
func Plays(req *base.Request) *base.Response {
	switch req.Method {
	case base.Options:
		return OK(base.Header{"Public": base.HeaderValue{"OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"}})
	case base.Describe:
		res := OK(base.Header{"Content-Type": base.HeaderValue{"application/sdp"},
			"Content-Base": base.HeaderValue{req.URL.String() + "/"}})
		res.Body = []byte(cameraSDP)
		return res
	case base.Setup:
		return OK(base.Header{"Transport": base.HeaderValue{"RTP/AVP/TCP;unicast;interleaved=0-1"},
			"Session": base.HeaderValue{"12345678;timeout=60"}})
	case base.Play, base.GetParameter, base.Teardown:
		return OK(base.Header{"Session": base.HeaderValue{"12345678"}})
	}
	return &base.Response{StatusCode: base.StatusNotImplemented, StatusMessage: "Not Implemented"}
}

// Playing answers as Plays and keeps the connection.
func Playing(req *base.Request) (*base.Response, bool) { return Plays(req), false }

// PlayThenClose answers as Plays and closes the connection right after
// answering PLAY: a camera whose sessions never last.
func PlayThenClose(req *base.Request) (*base.Response, bool) {
	return Plays(req), req.Method == base.Play
}

// RedirectTo answers DESCRIBE with 302 to loc (and the rest as Plays):
// with loc the camera's own URL, a redirect loop.
func RedirectTo(loc func() string) func(req *base.Request) (*base.Response, bool) {
	return func(req *base.Request) (*base.Response, bool) {
		if req.Method == base.Describe {
			return &base.Response{StatusCode: base.StatusFound, StatusMessage: "Found",
				Header: base.Header{"Location": base.HeaderValue{loc()}}}, false
		}
		return Plays(req), false
	}
}

// AsksBasic answers DESCRIBE with 401 and a basic challenge until it gets
// credentials, then with 404.
func AsksBasic(req *base.Request) (*base.Response, bool) {
	if req.Method != base.Describe {
		return Plays(req), false
	}
	if firstHeader(req.Header, "Authorization") == "" {
		return &base.Response{StatusCode: base.StatusUnauthorized, StatusMessage: "Unauthorized",
			Header: base.Header{"WWW-Authenticate": base.HeaderValue{`Basic realm="cam"`}}}, false
	}
	return &base.Response{StatusCode: base.StatusNotFound, StatusMessage: "Not Found"}, false
}
