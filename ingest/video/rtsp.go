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
// attempts starts at source_reconnect_min after a connection that played
// and doubles after each failed attempt up to source_reconnect_max.
func (s *source) run(ctx context.Context) {
	wait := s.in.cfg.SourceReconnectMin
	for {
		played, err := s.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		s.failed(err)
		if played {
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

// connect makes one connection and streams until it ends. It reports
// whether the server played (so the next wait is the shortest).
func (s *source) connect(ctx context.Context) (played bool, err error) {
	s.state.update(func(st *SourceStatus) { st.Attempts++ })
	u, err := base.ParseURL(s.cfg.URL)
	if err != nil {
		return false, fmt.Errorf("%w: not an RTSP URL", ErrConfig)
	}
	var transport atomic.Value
	c := &gortsplib.Client{
		Scheme: u.Scheme, Host: u.Host,
		ReadTimeout: s.in.cfg.SourceTimeout, WriteTimeout: s.in.cfg.SourceTimeout,
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
		return false, explain("describe", err, s.in.cfg.SourceTimeout)
	}
	medi, forma, dc, err := videoMedia(desc, s.cfg.Drone)
	if err != nil {
		return false, err
	}
	if _, err := c.Setup(desc.BaseURL, medi, 0, 0); err != nil {
		return false, explain("setup", err, s.in.cfg.SourceTimeout)
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
	if _, err := c.Play(nil); err != nil {
		return false, explain("play", err, s.in.cfg.SourceTimeout)
	}
	s.playing(transport.Load().(string), dc.Codec)
	err = c.Wait()
	if t, _ := transport.Load().(string); t != "" {
		s.state.update(func(st *SourceStatus) { st.Transport = t })
	}
	return true, explain("stream", err, s.in.cfg.SourceTimeout)
}

func ptr[T any](v T) *T { return &v }

// playing records a connection that plays.
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
	s.log.Info("video: RTSP source streaming", "transport", transport, "codec", codec, "reconnect", !first, "outage", outage.String())
}

// failed records a failed attempt or an ended stream; it logs the first
// failure of an outage and each new error, not every retry.
func (s *source) failed(err error) {
	if err == nil {
		err = errors.New("the server ended the stream")
	}
	now := s.in.now()
	msg := err.Error()
	var changed bool
	s.state.update(func(st *SourceStatus) {
		if st.State != SourceFailing {
			st.State, st.Since = SourceFailing, now
			changed = true
		}
		changed = changed || st.LastError != msg
		st.LastError = msg
	})
	if changed {
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
