package video

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SourceConfig is a camera or encoder that serves RTSP: the ingest pulls
// its video (DESCRIBE, SETUP, PLAY) and feeds the RTP and RTCP it
// receives into the same reorder, depacketize, chunk and event-time path
// as pushed RTP.
type SourceConfig struct {
	// URL is rtsp://[user:password@]host[:port]/path or rtsps://…;
	// credentials are answered with basic or digest authentication, as
	// the server asks. Required.
	URL string `yaml:"url"`
	// Drone is the drone id of the source's chunks. Required.
	Drone string `yaml:"drone"`
	// Transport is auto (default: UDP, then TCP when the server refuses
	// UDP or no packet arrives over it within 3 s), udp or tcp.
	Transport string `yaml:"transport"`
	// CAFile is a PEM file of the certificate authorities an rtsps://
	// server's certificate must chain to; default: the system's.
	CAFile string `yaml:"ca_file"`

	u     *url.URL       // parsed URL
	roots *x509.CertPool // parsed CAFile (nil: the system's)
}

// Reconnect bounds and the read timeout of RTSP sources (Config).
const (
	defaultReconnectMin  = 250 * time.Millisecond
	defaultReconnectMax  = 5 * time.Second
	defaultSourceTimeout = 10 * time.Second
)

// discoveredIDRe is the form of the ids of discovered drones.
var discoveredIDRe = regexp.MustCompile(`^ssrc-[0-9a-f]{8}$`)

// redactedURL is the source's URL with its password replaced, for
// statuses and messages.
func (s *SourceConfig) redactedURL() string {
	if s.u == nil {
		return ""
	}
	return s.u.Redacted()
}

// maskUserinfo is raw with whatever stands between its scheme and the
// last '@' replaced: a URL that does not parse may hold its password
// anywhere there.
func maskUserinfo(raw string) string {
	i, j := strings.Index(raw, "://"), strings.LastIndex(raw, "@")
	if i < 0 || j < i {
		return raw
	}
	return raw[:i+3] + "xxxxx" + raw[j:]
}

// tlsConfig is the TLS configuration of an rtsps:// source.
func (s *SourceConfig) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: s.roots, ServerName: s.u.Hostname(), MinVersion: tls.VersionTLS12}
}

// validate checks source i (the error names the field, never the password).
func (s *SourceConfig) validate(i int, ids map[string]bool) error {
	field := fmt.Sprintf("sources[%d]", i)
	bad := func(f, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field+f, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "rtsp" && u.Scheme != "rtsps") || u.Host == "" {
		return bad(".url", "%q is not an RTSP URL (want rtsp://host[:port]/path or rtsps://…, with user:password@ before the host when the camera asks for them; percent-encode a password's reserved characters)", maskUserinfo(s.URL))
	}
	s.u = u
	if !droneIDRe.MatchString(s.Drone) {
		return bad(".drone", "%q (want letters, digits, . _ -)", s.Drone)
	}
	if discoveredIDRe.MatchString(s.Drone) {
		return bad(".drone", "%q is the form of a discovered drone's id (ssrc-<8 hex digits>): choose another", s.Drone)
	}
	if ids[s.Drone] {
		return bad(".drone", "%q is already a drone or a source: one way in per drone", s.Drone)
	}
	ids[s.Drone] = true
	switch s.Transport {
	case "", "auto", "udp", "tcp":
	default:
		return bad(".transport", "%q (want auto, udp or tcp)", s.Transport)
	}
	if s.CAFile != "" {
		if u.Scheme != "rtsps" {
			return bad(".ca_file", "set for %s: a CA is for rtsps:// sources", u.Redacted())
		}
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return bad(".ca_file", "%v", err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pem) {
			return bad(".ca_file", "%s holds no PEM certificate", s.CAFile)
		}
	}
	return nil
}

// SourceState is where an RTSP source is in its connect-stream-reconnect
// cycle.
type SourceState uint8

// The states of an RTSP source.
const (
	// SourceConnecting: the first connection since start is being made.
	SourceConnecting SourceState = iota
	// SourceStreaming: the server plays and packets arrive.
	SourceStreaming
	// SourceFailing: the last attempt failed or the stream ended; the
	// source retries with bounded backoff (Since is the first failure).
	SourceFailing
)

var sourceStateNames = [...]string{"connecting", "streaming", "failing"}

func (s SourceState) String() string {
	if int(s) < len(sourceStateNames) {
		return sourceStateNames[s]
	}
	return fmt.Sprintf("SourceState(%d)", s)
}

// MarshalText makes the state its name in JSON.
func (s SourceState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name (status documents read back).
func (s *SourceState) UnmarshalText(b []byte) error {
	for i, n := range sourceStateNames {
		if n == string(b) {
			*s = SourceState(i)
			return nil
		}
	}
	return fmt.Errorf("video: unknown source state %q", b)
}

// SourceStatus is a snapshot of one RTSP source, in /status as
// video.sources.
type SourceStatus struct {
	// Drone and URL (its password replaced) name the source.
	Drone string `json:"drone"`
	URL   string `json:"url"`
	// State is connecting, streaming or failing; Since is when it
	// entered it (for failing: the first failure of this outage).
	State SourceState `json:"state"`
	Since time.Time   `json:"since"`
	// Transport is the transport in use or last used (UDP, TCP), Codec
	// the video format the server described.
	Transport string `json:"transport,omitempty"`
	Codec     Codec  `json:"codec,omitempty"`
	// LastError is the last failure (connect, authentication, stream
	// end); cleared once a session is steady (it has played for
	// source_reconnect_max with media arriving): its cause is gone.
	LastError string `json:"last_error,omitempty"`
	// Attempts are connection attempts; Connects those that played;
	// Reconnects plays after the first (each a discontinuity).
	Attempts   uint64 `json:"attempts"`
	Connects   uint64 `json:"connects"`
	Reconnects uint64 `json:"reconnects"`
	// RTP and RTCP packets received (before the drone's queue),
	// TransportLost the packets the RTSP client reported lost (UDP),
	// DecodeErrors the packets it could not decode.
	RTP           uint64 `json:"rtp"`
	RTCP          uint64 `json:"rtcp"`
	TransportLost uint64 `json:"transport_lost"`
	DecodeErrors  uint64 `json:"decode_errors"`
	// TransportSwitches are switches from UDP to TCP (auto transport).
	TransportSwitches uint64 `json:"transport_switches"`
}

// sourceState is a source's status, shared by its goroutine, the RTSP
// client's callbacks (the packet counters, atomic) and Stats.
type sourceState struct {
	rtp, rtcp, lost, decodeErrors, switches atomic.Uint64

	mu sync.Mutex
	st SourceStatus // guarded by mu; its counters are the atomics'
}

func (s *sourceState) update(f func(st *SourceStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.st)
}

func (s *sourceState) snapshot() SourceStatus {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	st.RTP, st.RTCP, st.TransportLost = s.rtp.Load(), s.rtcp.Load(), s.lost.Load()
	st.DecodeErrors, st.TransportSwitches = s.decodeErrors.Load(), s.switches.Load()
	return st
}
