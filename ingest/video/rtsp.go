package video

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bluenviron/gortsplib/v4"
	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/format"
	"github.com/bluenviron/gortsplib/v4/pkg/liberrors"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// source pulls one RTSP source: connect (DESCRIBE, SETUP of its video
// media, PLAY), stream until the connection ends, then reconnect after a
// bounded backoff — forever, until its ctx ends. Its packets go to the
// source's drone through the same bounded queue as pushed RTP; the drone
// tells the connections apart (sourceConn), so each reconnect is a new
// session whose first chunk is flagged discontinuity.
type source struct {
	cfg   *SourceConfig
	in    *Ingest
	log   *slog.Logger
	state sourceState
	// flapping is set while the source's sessions end before they are
	// steady (its log then stays quiet until one is).
	flapping atomic.Bool
}

// sourceConn is one played connection of a source: the items of its
// packets carry it, and a drone that sees a new one starts a new session.
type sourceConn struct {
	// dc is the drone configuration the server described (codec,
	// payload type, parameter sets).
	dc *DroneConfig
}

func newSource(in *Ingest, cfg *SourceConfig) *source {
	s := &source{cfg: cfg, in: in, log: in.log.With("drone", cfg.Drone, "url", cfg.redactedURL())}
	s.state.st = SourceStatus{Drone: cfg.Drone, URL: cfg.redactedURL(), State: SourceConnecting, Since: in.now()}
	return s
}

// run connects, streams and reconnects until ctx ends. The wait between
// attempts doubles after each failed attempt and each session that ended
// before it was steady, from source_reconnect_min up to
// source_reconnect_max; only a steady session (steadyAfter) makes the next
// wait source_reconnect_min again. A camera that accepts PLAY and closes
// at once so reconnects at most once every source_reconnect_max, not
// every source_reconnect_min (issue 37 case 9).
func (s *source) run(ctx context.Context) {
	wait := s.in.cfg.SourceReconnectMin
	for {
		steady, err := s.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		s.failed(err, steady)
		if steady {
			wait = s.in.cfg.SourceReconnectMin
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, s.in.cfg.SourceReconnectMax)
	}
}

// steadyAfter is how long a session must have played, with media
// arriving, to count as steady: source_reconnect_max. A steady session
// clears the source's last error and resets the backoff; with it the
// source connects at most once every source_reconnect_max however its
// camera fails (a session that ends before is followed by a doubled wait,
// one that lasts is itself that long).
func (s *source) steadyAfter() time.Duration { return s.in.cfg.SourceReconnectMax }

// connect makes one connection and streams until it ends. It reports
// whether the session became steady (see steadyAfter).
func (s *source) connect(ctx context.Context) (steady bool, err error) {
	s.state.update(func(st *SourceStatus) { st.Attempts++ })
	u, err := base.ParseURL(s.cfg.URL)
	if err != nil {
		return false, fmt.Errorf("%w: not an RTSP URL", ErrConfig)
	}
	g := newHostGuard(u)
	var transport atomic.Value
	c := &gortsplib.Client{
		Scheme: u.Scheme, Host: u.Host,
		ReadTimeout: s.in.cfg.SourceTimeout, WriteTimeout: s.in.cfg.SourceTimeout,
		DialContext: g.dial, OnRequest: g.onRequest, OnResponse: g.onResponse,
		OnTransportSwitch: func(error) {
			s.state.switches.Add(1)
			transport.Store("TCP")
		},
		OnPacketsLost: func(n uint64) { s.state.lost.Add(n) },
		OnDecodeError: func(error) { s.state.decodeErrors.Add(1) },
	}
	switch s.cfg.Transport {
	case "udp":
		c.Transport = ptr(gortsplib.TransportUDP)
		transport.Store("UDP")
	case "tcp":
		c.Transport = ptr(gortsplib.TransportTCP)
		transport.Store("TCP")
	default:
		transport.Store("UDP") // first UDP, then TCP (OnTransportSwitch)
	}
	if u.Scheme == "rtsps" {
		c.TLSConfig = s.cfg.tlsConfig()
	}
	if err := c.Start2(); err != nil {
		return false, err
	}
	// Close ends whatever the client waits for (dial, a request, the
	// stream): a source that never answers never holds shutdown up.
	stop := context.AfterFunc(ctx, c.Close)
	defer func() {
		stop()
		c.Close()
	}()
	desc, _, err := c.Describe(u)
	if err != nil {
		return false, s.explainGuarded("describe", err, g)
	}
	medi, forma, dc, err := videoMedia(desc, s.cfg.Drone)
	if err != nil {
		return false, err
	}
	if _, err := c.Setup(desc.BaseURL, medi, 0, 0); err != nil {
		return false, s.explainGuarded("setup", err, g)
	}
	conn := &sourceConn{dc: dc}
	c.OnPacketRTP(medi, forma, func(p *rtp.Packet) {
		s.state.rtp.Add(1)
		b, err := p.Marshal()
		if err != nil {
			return
		}
		s.in.enqueueSource(conn, item{b: b, owned: true, arrival: s.in.now(), conn: conn})
	})
	c.OnPacketRTCP(medi, func(p rtcp.Packet) {
		s.state.rtcp.Add(1)
		b, err := p.Marshal()
		if err != nil {
			return
		}
		s.in.enqueueSource(conn, item{b: b, owned: true, arrival: s.in.now(), rtcp: true, conn: conn})
	})
	rtp0 := s.state.rtp.Load()
	if _, err := c.Play(nil); err != nil {
		return false, s.explainGuarded("play", err, g)
	}
	s.playing(transport.Load().(string), dc.Codec)
	ended := make(chan struct{})
	watched := make(chan bool, 1)
	go func() { watched <- s.watchSteady(ended, rtp0) }()
	err = c.Wait()
	close(ended)
	steady = <-watched
	if t, _ := transport.Load().(string); t != "" {
		s.state.update(func(st *SourceStatus) { st.Transport = t })
	}
	return steady, explain("stream", err, s.in.cfg.SourceTimeout)
}

// watchSteady waits until the session that started playing when the
// source had received rtp0 packets is steady — it has played for
// steadyAfter and packets arrived since — or until ended is closed. It
// reports whether the session became steady; a steady session clears the
// source's last error (its cause is gone).
func (s *source) watchSteady(ended <-chan struct{}, rtp0 uint64) bool {
	t := time.NewTicker(s.steadyAfter())
	defer t.Stop()
	for {
		select {
		case <-ended:
			return false
		case <-t.C:
		}
		if s.state.rtp.Load() > rtp0 {
			s.steady()
			return true
		}
	}
}

// explainGuarded is explain, saying so when the error is the refusal of a
// host the credentials were withheld from.
func (s *source) explainGuarded(step string, err error, g *hostGuard) error {
	var bad liberrors.ErrClientBadStatusCode
	if h := g.withheldFrom(); h != "" && errors.As(err, &bad) && bad.Code == base.StatusUnauthorized {
		return fmt.Errorf("%s: %w: redirected to %s, which asks for credentials; the source's are sent to %s only: put %s in the source URL if it is the camera's",
			step, err, h, g.configuredHost(), h)
	}
	return explain(step, err, s.in.cfg.SourceTimeout)
}

func ptr[T any](v T) *T { return &v }

// playing records a connection that plays. It logs unless the source
// flaps (its last session ended before it was steady): a flapping source
// logs once when it starts flapping and again when a session is steady.
func (s *source) playing(transport string, codec Codec) {
	now := s.in.now()
	var outage time.Duration
	var first bool
	s.state.update(func(st *SourceStatus) {
		if st.State == SourceFailing {
			outage = now.Sub(st.Since)
		}
		st.State, st.Since, st.Transport, st.Codec = SourceStreaming, now, transport, codec
		st.Connects++
		first = st.Connects == 1
		if !first {
			st.Reconnects++
		}
	})
	if !s.flapping.Load() {
		s.log.Info("video: RTSP source streaming", "transport", transport, "codec", codec, "reconnect", !first, "outage", outage.String())
	}
}

// steady records a session that has been playing with media for
// steadyAfter: the last error's cause is gone.
func (s *source) steady() {
	s.state.update(func(st *SourceStatus) { st.LastError = "" })
	if s.flapping.Swap(false) {
		s.log.Info("video: RTSP source streaming steadily again", "after", s.steadyAfter().String())
	}
}

// failed records a failed attempt or an ended stream (steady: a session
// that had become steady). It logs the first failure of an outage and
// each new error, not every retry; sessions that end before they are
// steady log once, when the flapping starts.
func (s *source) failed(err error, steady bool) {
	if err == nil {
		err = errors.New("the server ended the stream")
	}
	now := s.in.now()
	msg := err.Error()
	wasFlapping := s.flapping.Load()
	var played bool
	var changed bool
	s.state.update(func(st *SourceStatus) {
		played = st.State == SourceStreaming
		if st.State != SourceFailing {
			st.State, st.Since = SourceFailing, now
			changed = !wasFlapping
		}
		changed = changed || st.LastError != msg
		st.LastError = msg
	})
	if played && !steady {
		s.flapping.Store(true)
	}
	switch {
	case !changed:
	case played && !steady:
		s.log.Warn("video: RTSP source plays, then the stream ends before it is steady; reconnecting with backoff", "err", msg,
			"steady_after", s.steadyAfter().String(), "reconnect_max", s.in.cfg.SourceReconnectMax.String())
	default:
		s.log.Warn("video: RTSP source failing; reconnecting with backoff", "err", msg,
			"reconnect_max", s.in.cfg.SourceReconnectMax.String())
	}
}

// explain makes a client error say what it means for the operator.
func explain(step string, err error, timeout time.Duration) error {
	if err == nil {
		return nil
	}
	var bad liberrors.ErrClientBadStatusCode
	var ne net.Error
	switch {
	case errors.As(err, &bad) && (bad.Code == base.StatusUnauthorized || bad.Code == base.StatusForbidden):
		return fmt.Errorf("%s: %w: check the user and password in the source URL", step, err)
	case errors.As(err, &bad) && bad.Code == base.StatusNotFound:
		return fmt.Errorf("%s: %w: no such stream on the server (path, or nothing published yet)", step, err)
	case errors.As(err, &ne) && ne.Timeout(), errors.As(err, new(liberrors.ErrClientRequestTimedOut)):
		return fmt.Errorf("%s: no answer within %v: %w", step, timeout, err)
	case errors.As(err, new(liberrors.ErrClientTCPTimeout)), errors.As(err, new(liberrors.ErrClientUDPTimeout)):
		return fmt.Errorf("%s: no packets within %v: %w", step, timeout, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%s: the server closed the connection (%w)", step, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: nothing listens there (%w)", step, err)
	}
	return fmt.Errorf("%s: %w", step, err)
}

// videoMedia picks the source's H.264 or H.265 media and the drone
// configuration it implies (payload type, codec, parameter sets from the
// SDP, cached before the first in-band ones).
func videoMedia(desc *description.Session, drone string) (*description.Media, format.Format, *DroneConfig, error) {
	var h264 *format.H264
	if m := desc.FindFormat(&h264); m != nil {
		sps, pps := h264.SafeParams()
		return m, h264, &DroneConfig{ID: drone, Codec: CodecH264, PayloadType: h264.PayloadTyp, params: nonEmpty(sps, pps)}, nil
	}
	var h265 *format.H265
	if m := desc.FindFormat(&h265); m != nil {
		vps, sps, pps := h265.SafeParams()
		return m, h265, &DroneConfig{ID: drone, Codec: CodecH265, PayloadType: h265.PayloadTyp, params: nonEmpty(vps, sps, pps)}, nil
	}
	var have []string
	for _, m := range desc.Medias {
		for _, f := range m.Formats {
			have = append(have, f.Codec())
		}
	}
	return nil, nil, nil, fmt.Errorf("describe: %w: no H.264 or H.265 video in the stream (it has %v)", ErrUnsupported, have)
}

func nonEmpty(ps ...[]byte) [][]byte {
	var out [][]byte
	for _, p := range ps {
		if len(p) > 0 {
			out = append(out, append([]byte(nil), p...))
		}
	}
	return out
}
