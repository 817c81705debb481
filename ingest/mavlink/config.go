package mavlink

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
)

// Config configures the MAVLink intake. NewDefaultConfig holds every
// default; at least one of the four endpoints must be set.
type Config struct {
	// UDPListen is a HOST:PORT on which to receive datagrams (a UDP
	// server, as a GCS on 14550). Default "": off.
	UDPListen string `yaml:"udp_listen"`
	// UDPConnect are HOST:PORTs of UDP servers (mavlink-router's UDP
	// server endpoints) to which the intake sends a HEARTBEAT every
	// HeartbeatInterval, so that they send it their traffic. Default none.
	UDPConnect []string `yaml:"udp_connect"`
	// TCPListen is a HOST:PORT on which to accept MAVLink over TCP. Default "": off.
	TCPListen string `yaml:"tcp_listen"`
	// TlogListen is a HOST:PORT on which to accept tlog streams over TCP
	// (each frame after its recorded 8-byte receive time, as `edge-agent
	// replay --tlog` sends a file): the recorded time is kept in the
	// mavlink-tlog-us header. Default "": off.
	TlogListen string `yaml:"tlog_listen"`
	// TCPConnect are HOST:PORTs of TCP servers (mavlink-router's TCP
	// server on 5760, SITL) to dial, redialled with a capped backoff. Default none.
	TCPConnect []string `yaml:"tcp_connect"`
	// Drones maps system ids to drone ids; a system id without an entry is
	// "mavlink-<sysid>" when Discover is on, else dropped (counted). Default none.
	Drones map[uint8]string `yaml:"drones"`
	// Discover takes system ids not in Drones as drones. Default true.
	Discover bool `yaml:"discover"`
	// MaxDrones bounds the discovered drones held at once (a slot each;
	// the drones of Drones always have theirs); a new system id beyond it
	// is dropped (counted) until a discovered drone silent for
	// DroneIdleTimeout gives its slot back. Default 64.
	MaxDrones int `yaml:"max_drones"`
	// DroneIdleTimeout: a drone silent this long may give its slot to a
	// newcomer. Default 1m.
	DroneIdleTimeout time.Duration `yaml:"drone_idle_timeout"`
	// Rates are per-message rates by MAVLink name: a rate in Hz keeps at
	// most that many of the message per drone and component a second
	// (ATTITUDE: 10), 0 drops the message, a message not named is kept
	// whole. Default none: every message kept.
	Rates map[string]float64 `yaml:"rates"`
	// Signing verifies MAVLink 2 signatures. Default off.
	Signing SigningConfig `yaml:"signing"`
	// MaxConnections bounds the TCP connections accepted at once; when
	// all are open, a newcomer takes the slot of the one that has sent
	// nothing the longest (for 2 s at least), else it is closed. Default 16.
	MaxConnections int `yaml:"max_connections"`
	// TCPIdleTimeout cuts an accepted TCP connection that sends nothing
	// this long. Default 30s.
	TCPIdleTimeout time.Duration `yaml:"tcp_idle_timeout"`
	// HeartbeatInterval is how often a HEARTBEAT goes to each UDPConnect
	// endpoint. Default 1s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// SystemID is the intake's own system id in the heartbeats it sends.
	// Default 254 (a GCS is usually 255).
	SystemID uint8 `yaml:"system_id"`
	// SocketBuffer is the UDP receive buffer asked of the kernel (raise
	// net.core.rmem_max). Default 4 MiB.
	SocketBuffer int `yaml:"socket_buffer"`
	// BatchWindow is the longest a frame taken waits for others before
	// their events are appended as one group, one store commit (MAVLink
	// owes the sender no acknowledgement: the intake trades this latency
	// for fewer commits and WAL syncs); negative appends each datagram's
	// or read's frames at once. Default 250ms.
	BatchWindow time.Duration `yaml:"batch_window"`
	// RebindAfter is the silence of the source a system id is bound to
	// (a UDP sender's address and port, a TCP connection) after which
	// another source may take it over; until then frames with the system
	// id from elsewhere are dropped (counted spoofed). A closed connection
	// releases its system ids at once. Default 5s.
	RebindAfter time.Duration `yaml:"rebind_after"`
	// BatchFrames appends a group as soon as it holds this many frames.
	// Default 256; at most 1024.
	BatchFrames int `yaml:"batch_frames"`

	// Dialect knows the messages; nil (default): DefaultDialect.
	Dialect *Dialect `yaml:"-"`
	// Now is the receiving clock. Default time.Now.
	Now func() time.Time `yaml:"-"`
	// Logger receives the intake's log lines. Default slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// SigningConfig configures MAVLink 2 signature checks. The key is never
// logged or shown.
type SigningConfig struct {
	// KeyFile holds the 32-byte secret key as 64 hex digits, or a
	// passphrase whose SHA-256 is the key (as MAVProxy's signing setup
	// and QGroundControl derive it). Default "": no key.
	KeyFile string `yaml:"key_file"`
	// KeyEnv names an environment variable holding the key the same way.
	// Default "".
	KeyEnv string `yaml:"key_env"`
	// Require drops unsigned frames (counted). Signed frames are checked
	// whenever a key is set, and dropped (counted) when their signature
	// is wrong or their timestamp replays. Default false.
	Require bool `yaml:"require"`
}

// Bounds of a group: within the store's own bounds of a commit
// (localstream.Options.MaxBatchEvents, MaxBatchBytes: 1,024 frames of at
// most 280 bytes and their headers are far below), and a frame durable
// within a few seconds.
const (
	maxBatchFrames = 1024
	maxBatchWindow = 5 * time.Second
)

// NewDefaultConfig returns the defaults (no endpoint set).
func NewDefaultConfig() Config {
	return Config{Discover: true, MaxDrones: 64, DroneIdleTimeout: time.Minute, MaxConnections: 16, TCPIdleTimeout: 30 * time.Second,
		HeartbeatInterval: time.Second, SystemID: 254, SocketBuffer: 4 << 20,
		BatchWindow: 250 * time.Millisecond, BatchFrames: 1024, RebindAfter: 5 * time.Second}
}

func (c Config) withDefaults() Config {
	d := NewDefaultConfig()
	if c.MaxDrones == 0 {
		c.MaxDrones = d.MaxDrones
	}
	if c.DroneIdleTimeout == 0 {
		c.DroneIdleTimeout = d.DroneIdleTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.TCPIdleTimeout == 0 {
		c.TCPIdleTimeout = d.TCPIdleTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.SystemID == 0 {
		c.SystemID = d.SystemID
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = d.SocketBuffer
	}
	if c.BatchWindow == 0 {
		c.BatchWindow = d.BatchWindow
	}
	if c.BatchFrames == 0 {
		c.BatchFrames = d.BatchFrames
	}
	if c.RebindAfter == 0 {
		c.RebindAfter = d.RebindAfter
	}
	if c.Dialect == nil {
		c.Dialect = DefaultDialect()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid field, naming it and the fix.
func (c Config) Validate() error {
	if c.UDPListen == "" && c.TCPListen == "" && c.TlogListen == "" && len(c.UDPConnect) == 0 && len(c.TCPConnect) == 0 {
		return fmt.Errorf("%w: no endpoint: set udp_listen, udp_connect, tcp_listen, tcp_connect or tlog_listen", ErrConfig)
	}
	for _, a := range append([]string{c.UDPListen, c.TCPListen, c.TlogListen}, append(c.UDPConnect, c.TCPConnect...)...) {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%w: endpoint %q: want HOST:PORT", ErrConfig, a)
		}
	}
	if c.MaxDrones < 1 || c.MaxDrones > 256 {
		return fmt.Errorf("%w: max_drones %d: want 1 to 256 (system ids are 8 bits)", ErrConfig, c.MaxDrones)
	}
	if c.DroneIdleTimeout < 0 {
		return fmt.Errorf("%w: drone_idle_timeout %v: want ≥ 0", ErrConfig, c.DroneIdleTimeout)
	}
	if c.MaxConnections < 1 {
		return fmt.Errorf("%w: max_connections %d: want ≥ 1", ErrConfig, c.MaxConnections)
	}
	if c.TCPIdleTimeout < 0 {
		return fmt.Errorf("%w: tcp_idle_timeout %v: want > 0", ErrConfig, c.TCPIdleTimeout)
	}
	if c.HeartbeatInterval < 0 {
		return fmt.Errorf("%w: heartbeat_interval %v: want > 0", ErrConfig, c.HeartbeatInterval)
	}
	if c.BatchFrames < 1 || c.BatchFrames > maxBatchFrames {
		return fmt.Errorf("%w: batch_frames %d: want 1 to %d", ErrConfig, c.BatchFrames, maxBatchFrames)
	}
	if c.RebindAfter < 0 {
		return fmt.Errorf("%w: rebind_after %v: want > 0", ErrConfig, c.RebindAfter)
	}
	if c.BatchWindow > maxBatchWindow {
		return fmt.Errorf("%w: batch_window %v: want at most %v (negative: no window)", ErrConfig, c.BatchWindow, maxBatchWindow)
	}
	seen := map[string]uint8{}
	for sysid, drone := range c.Drones {
		if sysid == 0 {
			return fmt.Errorf("%w: drones: system id 0 is broadcast, no drone", ErrConfig)
		}
		if id, mapped := telemetry.DroneID(drone); mapped || id == "" {
			return fmt.Errorf("%w: drones: %d: %q is no valid drone id (1-128 printable characters)", ErrConfig, sysid, drone)
		}
		if other, dup := seen[drone]; dup {
			return fmt.Errorf("%w: drones: system ids %d and %d both map to %q", ErrConfig, other, sysid, drone)
		}
		seen[drone] = sysid
	}
	d := c.Dialect
	if d == nil {
		d = DefaultDialect()
	}
	for name, hz := range c.Rates {
		if _, ok := d.ID(name); !ok {
			return fmt.Errorf("%w: rates: %q is no message of the dialect (write it as GLOBAL_POSITION_INT)", ErrConfig, name)
		}
		if hz < 0 || math.IsNaN(hz) || math.IsInf(hz, 0) {
			return fmt.Errorf("%w: rates: %s: %v: want a rate ≥ 0 in Hz (0 drops the message)", ErrConfig, name, hz)
		}
	}
	if c.Signing.Require && c.Signing.KeyFile == "" && c.Signing.KeyEnv == "" {
		return fmt.Errorf("%w: signing.require needs signing.key_file or signing.key_env", ErrConfig)
	}
	if c.Signing.KeyFile != "" && c.Signing.KeyEnv != "" {
		return fmt.Errorf("%w: signing: set key_file or key_env, not both", ErrConfig)
	}
	return nil
}
