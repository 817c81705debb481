package telemetry

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"time"
)

// Config configures an Ingester. Start from NewDefaultConfig. The yaml
// names are the agent's telemetry section (agent.TelemetryConfig embeds it).
type Config struct {
	// Broker is the MQTT broker URL: tcp://host:port, or ssl:// / tls:// /
	// mqtts:// for TLS. Required unless Listen is set; "" = no broker.
	Broker string `yaml:"broker"`
	// Listen is the HOST:PORT of the MQTT 3.1.1 server for publishers
	// (drones publishing straight to the agent, no broker in between); ""
	// (the default) = off. Broker and Listen may both be set: same lanes,
	// same store, same counters. See package mqttlisten for its protocol and bounds.
	Listen string `yaml:"listen"`
	// MaxConnections bounds the listener's connections; one more is
	// accepted and closed at once (Stats.ListenerRefused). Default 256.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerSource bounds the listener's connections from one
	// IP address; one more is closed at once (Stats.ListenerSourceRefused,
	// logged, /healthz), so one host cannot take every slot. Default 32.
	MaxConnectionsPerSource int `yaml:"max_connections_per_source"`
	// MaxUnconnected bounds the listener's connections that sent no
	// CONNECT yet (the listener has no authentication: these are the
	// unauthenticated ones); a newcomer evicts the oldest of them
	// (Stats.ListenerUnconnectedEvicted). Default 64.
	MaxUnconnected int `yaml:"max_unconnected"`
	// MaxKeepAlive caps the keep-alive a listener client asks for: a
	// keep-alive of 0 (none) or above it counts as MaxKeepAlive, so every
	// connection silent for 1.5 × it is closed. Default 5 min.
	MaxKeepAlive time.Duration `yaml:"max_keep_alive"`
	// ClientID is the MQTT client id. It must be stable across restarts (the
	// persistent session and the dedup entries hang off it): use
	// ClientIDFor(agentID). Required.
	ClientID string `yaml:"client_id"`
	// Topics are the telemetry topic patterns, each with a {drone} level.
	// Default ["drones/{drone}/telemetry/#"].
	Topics []string `yaml:"topics"`
	// StatusTopic is the drone status / last-will pattern; a payload
	// "offline" closes the drone's writer. "" disables. Default
	// "drones/{drone}/status".
	StatusTopic string `yaml:"status_topic"`
	// TimeField is the JSON field (dotted path for nested objects) holding
	// the event time. "" disables: every event gets the receive time,
	// flagged estimated. Default "timestamp".
	TimeField string `yaml:"time_field"`
	// TimeUnit reads a numeric TimeField. Default TimeAuto.
	TimeUnit TimeUnit `yaml:"time_unit"`
	// MaxPayload bounds one message's payload; a bigger one is counted
	// (Stats.Oversize), dropped and acked. Default 64 KiB.
	MaxPayload int `yaml:"max_payload"`
	// BinaryContentType is the content type of payloads that are not JSON.
	// Default "application/octet-stream".
	BinaryContentType string `yaml:"binary_content_type"`
	// LaneDepth bounds the messages buffered between the MQTT client and
	// the store, per drone and for all drones together. When it is reached,
	// delivery waits (Stats.LaneFullWaits): keep it ≥ the broker's
	// max_inflight_messages so that this never happens. (Their bytes are
	// bounded by MaxBufferedBytes.) Default 4096.
	LaneDepth int `yaml:"lane_depth"`
	// MaxBufferedBytes bounds the bytes of telemetry (payload and topic)
	// held in memory between the connections and the durable store — the
	// lanes and the store's append queue together — checked before a
	// message is delivered (so before anything acks it). When it is
	// reached, the connection whose message does not fit is not read
	// until room frees (Stats.BudgetWaits); the others go on. (Of it, at
	// most 1 MiB or two messages is in the store's queue at a time: see
	// storeWindow.) At least MaxPayload. Default 8 MiB.
	MaxBufferedBytes int `yaml:"max_buffered_bytes"`
	// MaxDrones bounds the drones (lanes). When all are taken, a new drone
	// takes the slot of a drone that is offline or silent for
	// DroneIdleTimeout; if none is, its message is refused at once
	// (Stats.DronesOverLimit, logged, Problems): no PUBACK on the
	// listener, acked and dropped from the broker (see Ingester.refuse).
	// Default 1024.
	MaxDrones int `yaml:"max_drones"`
	// DroneIdleTimeout is the silence after which a drone's slot may be
	// given to a new drone (its writer closed for watermarks). Default 60 s.
	DroneIdleTimeout time.Duration `yaml:"drone_idle_timeout"`
	// KeepAlive is the MQTT keep-alive. Default 15 s.
	KeepAlive time.Duration `yaml:"keep_alive"`
	// ConnectTimeout bounds one connection attempt. Default 10 s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxReconnectInterval caps the exponential reconnect backoff. Default 10 s.
	MaxReconnectInterval time.Duration `yaml:"max_reconnect_interval"`
	// Username for the broker; "" = none.
	Username string `yaml:"username"`
	// PasswordFile holds the password (trailing newline ignored).
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names an environment variable holding the password; used
	// when PasswordFile is "".
	PasswordEnv string `yaml:"password_env"`
	// CAFile is a PEM bundle of CAs to verify the broker; "" = system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key (PEM) for mutual TLS.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the TLS server name.
	ServerName string `yaml:"server_name"`
	// Logger receives connection events (never per-message logs, never secrets).
	// Default slog.Default(), as in every package of the agent.
	Logger *slog.Logger `yaml:"-"`
	// Now is the clock for receive times. Default time.Now.
	Now func() time.Time `yaml:"-"`
}

// NewDefaultConfig returns the defaults; set Broker and ClientID.
func NewDefaultConfig() Config {
	return Config{
		Topics:                  []string{"drones/{drone}/telemetry/#"},
		StatusTopic:             "drones/{drone}/status",
		TimeField:               "timestamp",
		TimeUnit:                TimeAuto,
		MaxPayload:              64 << 10,
		BinaryContentType:       "application/octet-stream",
		LaneDepth:               4096,
		MaxBufferedBytes:        8 << 20,
		MaxDrones:               1024,
		MaxConnections:          256,
		MaxConnectionsPerSource: 32,
		MaxUnconnected:          64,
		MaxKeepAlive:            5 * time.Minute,
		DroneIdleTimeout:        time.Minute,
		KeepAlive:               15 * time.Second,
		ConnectTimeout:          10 * time.Second,
		MaxReconnectInterval:    10 * time.Second,
	}
}

// withDefaults fills zero fields from NewDefaultConfig.
func (c Config) withDefaults() Config {
	d := NewDefaultConfig()
	if c.Topics == nil {
		c.Topics = d.Topics
	}
	if c.TimeUnit == "" {
		c.TimeUnit = TimeAuto
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = d.MaxPayload
	}
	if c.BinaryContentType == "" {
		c.BinaryContentType = d.BinaryContentType
	}
	if c.LaneDepth == 0 {
		c.LaneDepth = d.LaneDepth
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = d.MaxBufferedBytes
	}
	if c.MaxDrones == 0 {
		c.MaxDrones = d.MaxDrones
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.MaxConnectionsPerSource == 0 {
		c.MaxConnectionsPerSource = d.MaxConnectionsPerSource
	}
	if c.MaxUnconnected == 0 {
		c.MaxUnconnected = d.MaxUnconnected
	}
	if c.MaxKeepAlive == 0 {
		c.MaxKeepAlive = d.MaxKeepAlive
	}
	if c.DroneIdleTimeout == 0 {
		c.DroneIdleTimeout = d.DroneIdleTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = d.KeepAlive
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.MaxReconnectInterval == 0 {
		c.MaxReconnectInterval = d.MaxReconnectInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports the first invalid field, naming it and the fix.
func (c Config) Validate() error {
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("%w: listen %q: want HOST:PORT such as 0.0.0.0:1883", ErrConfig, c.Listen)
		}
	}
	if c.MaxConnections < 0 || c.MaxConnectionsPerSource < 0 || c.MaxUnconnected < 0 || c.MaxKeepAlive < 0 {
		return fmt.Errorf("%w: max_connections, max_connections_per_source, max_unconnected and max_keep_alive must not be negative", ErrConfig)
	}
	if c.Broker == "" && c.Listen != "" {
		return c.validateIntake()
	}
	u, err := url.Parse(c.Broker)
	if c.Broker == "" || err != nil || u.Host == "" {
		return fmt.Errorf("%w: mqtt broker %q: want a URL such as tcp://127.0.0.1:1883 (or set listen)", ErrConfig, c.Broker)
	}
	switch u.Scheme {
	case "tcp", "mqtt", "ssl", "tls", "mqtts", "ws", "wss":
	default:
		return fmt.Errorf("%w: mqtt broker %q: scheme must be tcp, mqtt, ssl, tls, mqtts, ws or wss", ErrConfig, c.Broker)
	}
	if c.ClientID == "" || len(c.ClientID) > 65535 {
		return fmt.Errorf("%w: client id is required (use ClientIDFor(agent id))", ErrConfig)
	}
	return c.validateIntake()
}

// validateIntake checks the fields common to the broker client and the
// listener.
func (c Config) validateIntake() error {
	if len(c.Topics) == 0 {
		return fmt.Errorf("%w: at least one mqtt topic pattern is required", ErrConfig)
	}
	for _, t := range c.Topics {
		if _, err := ParsePattern(t); err != nil {
			return fmt.Errorf("%w: mqtt topic: %w", ErrConfig, err)
		}
	}
	if c.StatusTopic != "" {
		if _, err := ParsePattern(c.StatusTopic); err != nil {
			return fmt.Errorf("%w: status topic: %w", ErrConfig, err)
		}
	}
	if _, err := ParseTimeUnit(string(c.TimeUnit)); err != nil {
		return err
	}
	if c.MaxPayload < 0 || c.LaneDepth < 0 || c.MaxDrones < 0 || c.MaxBufferedBytes < 0 {
		return fmt.Errorf("%w: max payload, lane depth, max drones and max buffered bytes must not be negative", ErrConfig)
	}
	if c.MaxBufferedBytes < c.MaxPayload {
		return fmt.Errorf("%w: max_buffered_bytes %d is below max_payload %d: raise max_buffered_bytes or lower max_payload", ErrConfig, c.MaxBufferedBytes, c.MaxPayload)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: client cert and key files must be set together", ErrConfig)
	}
	if c.PasswordFile != "" && c.PasswordEnv != "" {
		return fmt.Errorf("%w: set either password file or password env, not both", ErrConfig)
	}
	return nil
}

var clientIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// ClientIDFor derives the stable MQTT client id of an agent:
// "edge-agent-<agent id>" with characters outside [A-Za-z0-9_.-] replaced by '_'.
func ClientIDFor(agentID string) string {
	return "edge-agent-" + clientIDUnsafe.ReplaceAllString(agentID, "_")
}
