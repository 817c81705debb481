package video

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

// Config configures the video ingest. Zero values take the defaults of
// NewDefaultConfig (New applies them).
type Config struct {
	// Listen is the RTP address, default "0.0.0.0:5004". RTCP muxed on the
	// same port (RFC 5761) is always accepted.
	Listen string `yaml:"listen"`
	// RTCPListen is the RTCP address; default: Listen's port + 1.
	// "mux" listens on no separate RTCP port.
	RTCPListen string `yaml:"rtcp_listen"`
	// PayloadTypes maps RTP payload types to codecs for drones that do not
	// set their own; default {96: h264}. Other payload types are stored raw.
	PayloadTypes map[uint8]Codec `yaml:"payload_types"`
	// ClockRate is the RTP clock of video, default 90000.
	ClockRate int `yaml:"clock_rate"`
	// Drones are the known drones.
	Drones []DroneConfig `yaml:"drones"`
	// Sources are RTSP cameras and encoders to pull video from, each
	// as one drone (see SourceConfig).
	Sources []SourceConfig `yaml:"sources"`
	// SourceReconnectMin and SourceReconnectMax bound the wait before an
	// RTSP source's next attempt: min after a steady session ends (one
	// that played for max with media arriving), doubling after each
	// failed attempt and each shorter session, up to max. Defaults 250ms,
	// 5s.
	SourceReconnectMin time.Duration `yaml:"source_reconnect_min"`
	SourceReconnectMax time.Duration `yaml:"source_reconnect_max"`
	// SourceTimeout bounds each RTSP request and the silence of a
	// playing stream (no packet for this long ends it), default 10s.
	SourceTimeout time.Duration `yaml:"source_timeout"`
	// Allow lists the source IPs or CIDRs accepted; empty accepts all.
	// Packets from elsewhere are dropped and counted (rejected).
	Allow []string `yaml:"allow"`
	// Discover accepts RTP from SSRCs not in Drones as drone "ssrc-<hex>",
	// default true. Unconfigured sources must first send two packets in
	// sequence (RFC 3550 probation).
	Discover *bool `yaml:"discover"`
	// MaxDrones bounds the discovered drones running at once, default 64
	// (configured drones and sources take no slot: the config bounds
	// them, and they are never evicted nor refused). When the slots are
	// all taken, a discovered newcomer takes the slot of the discovered
	// drone silent the longest if it has been silent for EvictIdle
	// (counted evicted); else it is refused (counted).
	MaxDrones int `yaml:"max_drones"`
	// EvictIdle is the silence after which a discovered drone may lose its
	// slot to a newcomer when max_drones are taken, default 2s.
	EvictIdle time.Duration `yaml:"evict_idle"`
	// RebindAfter is the silence of an SSRC's source after which another
	// source may take the SSRC over, default 5s. Until then RTP and
	// sender reports for the SSRC from any other address or port are
	// dropped (counted spoofed): RFC 3550 §8.2, a collision or a spoof.
	RebindAfter time.Duration `yaml:"rebind_after"`
	// ReorderPackets bounds the reorder buffer per drone, default 256 (max 511).
	ReorderPackets int `yaml:"reorder_packets"`
	// ReorderMaxWait is how long a gap may hold packets back, default 50ms.
	ReorderMaxWait time.Duration `yaml:"reorder_max_wait"`
	// ChunkMaxDuration cuts a chunk spanning more, default 2s.
	ChunkMaxDuration time.Duration `yaml:"chunk_max_duration"`
	// ChunkMaxBytes cuts a chunk before its payload and its headers
	// (frame-pts, frame-sizes, frame-keys: 48 bytes per frame, 512 per
	// chunk) exceed this, default 900 KiB: below the central store's 1 MiB
	// max payload, leaving room for the centre's own headers. A frame
	// that cannot fit a chunk alone is dropped (counted), also while it is
	// being assembled.
	ChunkMaxBytes int `yaml:"chunk_max_bytes"`
	// ChunkMaxFrames cuts a chunk before it holds more frames, default
	// 1024 (2 s at 500 fps): it bounds the per-frame headers.
	ChunkMaxFrames int `yaml:"chunk_max_frames"`
	// MaxClockJump is the largest change of the RTP→wall-clock mapping taken
	// as drift; a larger one is a discontinuity. Default 500ms.
	MaxClockJump time.Duration `yaml:"max_clock_jump"`
	// MaxClockSkew is the receiving clock's bound on event times (the
	// agent sets it from watermark.max_clock_skew): a sender report
	// further than this from its arrival is ignored while the mapping in
	// use is within it (see clock.go). 0 disables the check.
	MaxClockSkew time.Duration `yaml:"-"`
	// SessionTimeout closes a drone silent for this long (its writer is
	// closed for watermarks), default 30s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// QueueDepth bounds the packets queued per drone, default 4096; a full
	// queue drops packets (counted).
	QueueDepth int `yaml:"queue_depth"`
	// QueueBytes bounds the bytes of datagrams queued for all drones
	// together, default 32 MiB; beyond it packets are dropped (counted
	// QueueDrops). Without it, 64 stalled drones could hold 64 × 4096
	// datagrams of 9000 bytes.
	QueueBytes int `yaml:"queue_bytes"`
	// ReadBatch is the number of datagrams per recvmmsg, default 64.
	ReadBatch int `yaml:"read_batch"`
	// MaxPacketSize is the largest datagram accepted, default 9000; larger
	// ones are dropped (counted oversize).
	MaxPacketSize int `yaml:"max_packet_size"`
	// SocketBuffer is the requested receive buffer, default 16 MiB.
	SocketBuffer int `yaml:"socket_buffer"`
	// RawBatchBytes and RawBatchAge bound a batch of raw RTP packets
	// (unknown payload types), defaults 64 KiB and 1s.
	RawBatchBytes int           `yaml:"raw_batch_bytes"`
	RawBatchAge   time.Duration `yaml:"raw_batch_age"`
	// Logger receives drops and failures (never a line per packet).
	// Default slog.Default(), as in every package of the agent.
	Logger *slog.Logger `yaml:"-"`
	// Now is the clock for arrival and ingest times. Default time.Now.
	Now func() time.Time `yaml:"-"`
}

// DroneConfig maps RTP sources to a drone.
type DroneConfig struct {
	// ID is the drone id (routing key). Required.
	ID string `yaml:"id"`
	// Addr is the source "ip" or "ip:port"; packets from it belong to this
	// drone whatever their SSRC (an SSRC change is a new session, flagged
	// as a discontinuity).
	Addr string `yaml:"addr"`
	// SSRC, when non-zero, maps this SSRC to the drone (no probation).
	SSRC uint32 `yaml:"ssrc"`
	// PayloadType and Codec override Config.PayloadTypes for this drone.
	PayloadType uint8 `yaml:"payload_type"`
	Codec       Codec `yaml:"codec"`
	// Fmtp is the SDP a=fmtp value; its sprop-* parameter sets are cached
	// before the first in-band ones.
	Fmtp string `yaml:"fmtp"`

	src    netip.AddrPort // parsed Addr (port 0 = any)
	params [][]byte       // parsed Fmtp
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	t := true
	return Config{
		Listen:           "0.0.0.0:5004",
		PayloadTypes:     map[uint8]Codec{96: CodecH264},
		ClockRate:        90000,
		Discover:         &t,
		MaxDrones:        64,
		EvictIdle:        2 * time.Second,
		RebindAfter:      5 * time.Second,
		ReorderPackets:   256,
		ReorderMaxWait:   50 * time.Millisecond,
		ChunkMaxDuration: 2 * time.Second,
		ChunkMaxBytes:    900 << 10,
		ChunkMaxFrames:   1024,
		MaxClockJump:     500 * time.Millisecond,
		SessionTimeout:   30 * time.Second,
		QueueDepth:       4096,
		QueueBytes:       32 << 20,
		ReadBatch:        64,
		MaxPacketSize:    9000,
		SocketBuffer:     16 << 20,
		RawBatchBytes:    64 << 10,
		RawBatchAge:      time.Second,

		SourceReconnectMin: defaultReconnectMin,
		SourceReconnectMax: defaultReconnectMax,
		SourceTimeout:      defaultSourceTimeout,
	}
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	d := NewDefaultConfig()
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.PayloadTypes == nil {
		c.PayloadTypes = d.PayloadTypes
	}
	if c.Discover == nil {
		c.Discover = d.Discover
	}
	set(&c.ClockRate, d.ClockRate)
	set(&c.MaxDrones, d.MaxDrones)
	set(&c.ReorderPackets, d.ReorderPackets)
	set(&c.ChunkMaxBytes, d.ChunkMaxBytes)
	set(&c.ChunkMaxFrames, d.ChunkMaxFrames)
	set(&c.QueueDepth, d.QueueDepth)
	set(&c.QueueBytes, d.QueueBytes)
	set(&c.ReadBatch, d.ReadBatch)
	set(&c.MaxPacketSize, d.MaxPacketSize)
	set(&c.SocketBuffer, d.SocketBuffer)
	set(&c.RawBatchBytes, d.RawBatchBytes)
	setD(&c.ReorderMaxWait, d.ReorderMaxWait)
	setD(&c.ChunkMaxDuration, d.ChunkMaxDuration)
	setD(&c.MaxClockJump, d.MaxClockJump)
	setD(&c.SessionTimeout, d.SessionTimeout)
	setD(&c.EvictIdle, d.EvictIdle)
	setD(&c.RebindAfter, d.RebindAfter)
	setD(&c.RawBatchAge, d.RawBatchAge)
	setD(&c.SourceReconnectMin, d.SourceReconnectMin)
	setD(&c.SourceReconnectMax, d.SourceReconnectMax)
	setD(&c.SourceTimeout, d.SourceTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

var droneIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate checks c (after withDefaults) and parses addresses and fmtp.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	if _, err := net.ResolveUDPAddr("udp", c.Listen); err != nil {
		return bad("listen", "%v (want host:port)", err)
	}
	if c.RTCPListen != "" && c.RTCPListen != "mux" {
		if _, err := net.ResolveUDPAddr("udp", c.RTCPListen); err != nil {
			return bad("rtcp_listen", "%v (want host:port or \"mux\")", err)
		}
	}
	for pt, codec := range c.PayloadTypes {
		if codec != CodecH264 && codec != CodecH265 {
			return bad("payload_types", "payload type %d: codec %q (want h264 or h265)", pt, codec)
		}
	}
	if c.ChunkMaxBytes < 64<<10 || c.ChunkMaxBytes > 4<<20 {
		return bad("chunk_max_bytes", "%d (want 64 KiB to 4 MiB)", c.ChunkMaxBytes)
	}
	if c.QueueBytes < c.MaxPacketSize {
		return bad("queue_bytes", "%d (want at least max_packet_size, %d)", c.QueueBytes, c.MaxPacketSize)
	}
	if c.ChunkMaxFrames < 1 || c.ChunkMaxFrames > 8192 {
		return bad("chunk_max_frames", "%d (want 1 to 8192)", c.ChunkMaxFrames)
	}
	if c.ChunkMaxDuration < 100*time.Millisecond {
		return bad("chunk_max_duration", "%s (want at least 100ms)", c.ChunkMaxDuration)
	}
	if c.ReorderPackets < 1 || c.ReorderPackets >= reorderWindow {
		return bad("reorder_packets", "%d (want 1 to %d)", c.ReorderPackets, reorderWindow-1)
	}
	if c.ClockRate < 1000 {
		return bad("clock_rate", "%d (want the RTP clock in Hz, 90000 for video)", c.ClockRate)
	}
	for _, a := range c.Allow {
		if _, err := parsePrefix(a); err != nil {
			return bad("allow", "%q: %v (want an IP or CIDR)", a, err)
		}
	}
	seen := map[string]bool{}
	for i := range c.Drones {
		d := &c.Drones[i]
		field := fmt.Sprintf("drones[%d]", i)
		if !droneIDRe.MatchString(d.ID) {
			return bad(field+".id", "%q (want letters, digits, . _ -)", d.ID)
		}
		if seen[d.ID] {
			return bad(field+".id", "%q listed twice", d.ID)
		}
		seen[d.ID] = true
		if d.Addr == "" && d.SSRC == 0 {
			return bad(field, "needs addr or ssrc")
		}
		if d.Addr != "" {
			ap, err := parseSource(d.Addr)
			if err != nil {
				return bad(field+".addr", "%q: %v (want ip or ip:port)", d.Addr, err)
			}
			d.src = ap
		}
		if d.Codec != "" && d.Codec != CodecH264 && d.Codec != CodecH265 {
			return bad(field+".codec", "%q (want h264 or h265)", d.Codec)
		}
		ps, err := spropParameterSets(d.Fmtp)
		if err != nil {
			return bad(field+".fmtp", "%v", err)
		}
		d.params = ps
	}
	for i := range c.Sources {
		if err := c.Sources[i].validate(i, seen); err != nil {
			return err
		}
	}
	if c.SourceReconnectMin < 10*time.Millisecond || c.SourceReconnectMax < c.SourceReconnectMin {
		return bad("source_reconnect_min", "%v to %v (want at least 10ms, and source_reconnect_max at least that)", c.SourceReconnectMin, c.SourceReconnectMax)
	}
	if c.SourceTimeout < 100*time.Millisecond {
		return bad("source_timeout", "%v (want at least 100ms)", c.SourceTimeout)
	}
	return nil
}

// codecs returns the payload type map of drone d.
func (c *Config) codecs(d *DroneConfig) map[uint8]Codec {
	if d == nil || d.Codec == "" {
		return c.PayloadTypes
	}
	pt := d.PayloadType
	if pt == 0 {
		pt = 96
	}
	return map[uint8]Codec{pt: d.Codec}
}

func parseSource(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a.Unmap(), 0), nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
