package agent

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/edge-agent/edge-agent/devices"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/live"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// ErrConfig marks an invalid configuration (exit status 2).
var ErrConfig = errors.New("config")

// Config is the agent's whole configuration: the YAML file, overridden by
// flags. NewDefaultConfig holds every default; agent.example.yaml
// documents each key.
type Config struct {
	// AgentID names the agent at the centre (subjects, fencing). Empty:
	// generated once and kept in <data_dir>/agent-id.
	AgentID string `yaml:"agent_id"`
	// DataDir holds the local store, the agent id and an embedded central's files.
	DataDir string `yaml:"data_dir"`
	// Log configures logging.
	Log LogConfig `yaml:"log"`
	// HTTP serves /metrics, /healthz and /status.
	HTTP HTTPConfig `yaml:"http"`
	// Store configures the local store.
	Store StoreConfig `yaml:"store"`
	// Streams configures the local streams by name (video, telemetry, health).
	Streams map[string]StreamConfig `yaml:"streams"`
	// Watermark configures the watermark trackers.
	Watermark WatermarkConfig `yaml:"watermark"`
	// Video configures RTP capture.
	Video VideoConfig `yaml:"video"`
	// Telemetry configures MQTT capture.
	Telemetry TelemetryConfig `yaml:"telemetry"`
	// MAVLink configures MAVLink capture into the telemetry stream.
	MAVLink MAVLinkConfig `yaml:"mavlink"`
	// Central configures replication to the central JetStream.
	Central CentralConfig `yaml:"central"`
	// Live configures the live lane: each drone's latest value sent ahead
	// of the backlog, inside a share of the uplink cap (docs/live.md).
	Live live.Config `yaml:"live"`
	// Devices configures the drone registry, host health and disk pressure.
	Devices DevicesConfig `yaml:"devices"`
	// Runtime configures the Go runtime of `edge-agent run`.
	Runtime RuntimeConfig `yaml:"runtime"`
}

// RuntimeConfig configures the Go runtime of `edge-agent run`.
type RuntimeConfig struct {
	// Procs is GOMAXPROCS. 0 (default): sized to the load, between 1 and
	// the CPUs the process may use (package procs); N > 0 fixes it at N.
	// A GOMAXPROCS environment variable fixes it too.
	Procs int `yaml:"procs"`
}

// LogConfig configures log/slog.
type LogConfig struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is text or json. Default text.
	Format string `yaml:"format"`
}

// HTTPConfig configures the HTTP endpoints.
type HTTPConfig struct {
	// Listen is HOST:PORT; empty disables. Default 127.0.0.1:9464.
	Listen string `yaml:"listen"`
	// Pprof serves /debug/pprof (CPU, heap, goroutine profiles; GET
	// only; a GET of profile or trace records for its seconds). Default
	// false. It has no authentication: keep http.listen on loopback (a
	// warning at start says when it is not).
	Pprof bool `yaml:"pprof"`
	// Hosts are the names, besides IP addresses and localhost, that the
	// listener may be reached by (the Host header); requests naming
	// another host are refused (421): a DNS rebinding page cannot read
	// the agent from the operator's browser. Default none.
	Hosts []string `yaml:"hosts"`
}

// StoreConfig configures the local store (see localstream.Options).
type StoreConfig struct {
	// Durability is always (fsync before ack, default) or periodic.
	Durability string `yaml:"durability"`
	// SyncInterval is the fsync period in periodic mode. Default 1s.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// GroupCommitWindow is how long the store may hold a commit open for
	// more appends while others are in flight: fewer fsyncs per event
	// under load, at most this much added latency; a lone writer is never
	// held (see localstream.Options.GroupCommitWindow). Default 1ms; 0 off.
	GroupCommitWindow time.Duration `yaml:"group_commit_window"`
	// MaxEventBytes bounds one event. Default 4 MiB.
	MaxEventBytes int `yaml:"max_event_bytes"`
	// QueueDepth bounds the append queue. Default 8192.
	QueueDepth int `yaml:"queue_depth"`
	// MinFreeBytes: appends fail below this free space. Default 128 MiB;
	// it cannot be turned off, and must be below the filesystem's size
	// (checked at start).
	MinFreeBytes int64 `yaml:"min_free_bytes"`
	// ValueLogFileSize is the size of one payload file (large payloads:
	// video chunks; Badger's own value-log files are 1 MiB): deleted data goes
	// back to the filesystem a whole file at a time, so up to two files per
	// open segment stay on disk after shedding. 0
	// (default): 1/16 of the filesystem, between 2 × max_event_bytes and
	// 64 MiB.
	ValueLogFileSize int64 `yaml:"value_log_file_size"`
	// FailedExitAfter is how long the agent stays up after its store
	// failed (a write failed: a disk gone read-only or failing, the data
	// directory removed): intake stops acknowledging (the broker keeps
	// the messages), /healthz is 503 with the reason, what is durable
	// replicates on; then it exits with status 1 for systemd to restart
	// it, and the restart opens the store again once the disk is back.
	// Default 30s; 0 exits after the final commit.
	FailedExitAfter time.Duration `yaml:"failed_exit_after"`
}

// StreamConfig configures one local stream.
type StreamConfig struct {
	// Scaling is the stream's scaling policy.
	Scaling localstream.ScalingPolicy `yaml:"scaling"`
}

// WatermarkConfig configures the watermark trackers.
type WatermarkConfig struct {
	// IdleTimeout: a writer silent this long stops holding the watermark back. Default 30s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// AllowedLateness: out-of-orderness allowed to every writer. Default 0.
	AllowedLateness time.Duration `yaml:"allowed_lateness"`
	// MaxClockSkew: how far an event time may be ahead of its ingest time
	// before it is flagged clock-skew and its mark bounded. Default 10s; -1 disables.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// MaxClockBehind: how far an event time may be behind its ingest time
	// before it is flagged clock-skew and late and its writer stops holding
	// the watermark back. Default 10m; -1 disables.
	MaxClockBehind time.Duration `yaml:"max_clock_behind"`
}

// VideoConfig configures RTP capture.
type VideoConfig struct {
	// Enabled turns video capture on. Default true.
	Enabled bool `yaml:"enabled"`
	// Config is the video package's configuration (listen, drones, chunks, ...).
	video.Config `yaml:",inline"`
}

// TelemetryConfig configures MQTT capture.
type TelemetryConfig struct {
	// Enabled turns telemetry capture on. Default true.
	Enabled bool `yaml:"enabled"`
	// Config is the telemetry package's configuration (broker, listen,
	// topics, time field, bounds, credentials, ...). The agent's defaults
	// are the package's, with the broker tcp://127.0.0.1:1883 — unless
	// listen is set: then the broker is off unless set too (in the file or
	// by --mqtt-broker); client_id defaults to one derived from the agent id.
	telemetry.Config `yaml:",inline"`
}

// CentralConfig configures the central JetStream and replication.
type CentralConfig struct {
	// URL is "embedded" (an in-process JetStream server) or a comma-separated
	// list of nats:// or tls:// URLs. Empty disables replication.
	URL string `yaml:"url"`
	// Embedded configures the in-process server when URL is "embedded".
	Embedded EmbeddedCentral `yaml:"embedded"`
	// Replicas of created EDGE_<STREAM> streams. Default 1 (3 for a cluster).
	Replicas int `yaml:"replicas"`
	// CredsFile, NkeySeedFile, User/PasswordFile authenticate (never logged).
	CredsFile    string `yaml:"creds_file"`
	NkeySeedFile string `yaml:"nkey_seed_file"`
	User         string `yaml:"user"`
	PasswordFile string `yaml:"password_file"`
	// CAFile, CertFile, KeyFile configure TLS.
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// IgnoreDiscoveredServers uses only the configured URLs (proxies, NAT).
	IgnoreDiscoveredServers bool `yaml:"ignore_discovered_servers"`
	// CommitInterval is the longest a transaction stays open. Default 100ms.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// Layout is the central layout written: 2 (one message per
	// transaction, packed and compressed) or 1 (one message per event).
	// Both are read by the reader API, `read` and `export`. Default 0 =
	// 2, with the embedded central and a central URL alike: layout 1's
	// atomic batches are what the server's in-flight limits bound, and it
	// sends 1.7x the bytes (docs/fleet.md); 1 stays for consumers that
	// read one raw message per event (docs/sync.md).
	Layout int `yaml:"layout"`
	// MaxTxnEvents bounds a transaction's events. Default 0 = the
	// layout's bound (layout 2: 100,000, the max payload binds first;
	// layout 1: 999, below the server's batch limit of 1000).
	MaxTxnEvents int `yaml:"max_txn_events"`
	// MaxTxnBytes bounds a transaction's bytes. Default 8 MiB.
	MaxTxnBytes int64 `yaml:"max_txn_bytes"`
	// MaxBatchSize, MaxBatchInflight, BatchTimeout and MaxControlLine are
	// the central server's limits (jetstream limits batch max_msgs,
	// max_inflight_per_stream, timeout; max_control_line), which a client
	// cannot read: set them when the server's differ from nats-server's
	// defaults (1000, 50, 10s, 4096). The agent also lowers the batch
	// limits to what the server's rejections say.
	MaxBatchSize     int           `yaml:"max_batch_size"`
	MaxBatchInflight int           `yaml:"max_batch_inflight"`
	BatchTimeout     time.Duration `yaml:"batch_timeout"`
	MaxControlLine   int           `yaml:"max_control_line"`
	// UplinkBytesPerSec caps replication over all streams; 0 = unlimited.
	UplinkBytesPerSec int64 `yaml:"uplink_bytes_per_sec"`
	// Priorities order streams on the uplink (lower first). Default
	// telemetry 0, health 1, video 2.
	Priorities map[string]int `yaml:"priorities"`
	// ShutdownTimeout bounds the final commit on shutdown. Default 5s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// UnreadyAfter is how long the centre may be unreachable, once it
	// has been reached, before /readyz fails (a centre never reached
	// fails it at once; /healthz is not affected). Default 5m.
	UnreadyAfter time.Duration `yaml:"unready_after"`
	// Takeover is the operator's order to take over this agent id's
	// commit chains at start even when another store (or a copy of this
	// one) wrote them last (see docs/sync.md, "Lost state"). Flag only
	// (edge-agent run --takeover): left in a file, it would let a twin
	// take over at every restart.
	Takeover bool `yaml:"-"`
}

// EffectiveLayout is the layout written: Layout, or 2 for 0.
func (c CentralConfig) EffectiveLayout() int {
	if c.Layout != 0 {
		return c.Layout
	}
	return 2
}

// EmbeddedCentral configures an in-process JetStream server.
type EmbeddedCentral struct {
	// Listen is the client HOST:PORT. Default 127.0.0.1:4222.
	Listen string `yaml:"listen"`
	// DataDir defaults to <data_dir>/central.
	DataDir string `yaml:"data_dir"`
}

// DevicesConfig configures the registry, host health and disk pressure.
type DevicesConfig struct {
	// HealthInterval is the host health sampling period; 0 disables. Default 10s.
	HealthInterval time.Duration `yaml:"health_interval"`
	// OfflineAfter: a drone silent this long is offline. Default 30s.
	OfflineAfter time.Duration `yaml:"offline_after"`
	// MaxDrones bounds the registry. Default 1024.
	MaxDrones int `yaml:"max_drones"`
	// Disk configures disk pressure: thresholds (bytes or % of the
	// filesystem), the shedding policy and its order.
	Disk devices.PressureConfig `yaml:"disk"`
}

// NewDefaultConfig returns the defaults of every knob.
func NewDefaultConfig() Config {
	return Config{
		DataDir: "/var/lib/edge-agent",
		Log:     LogConfig{Level: "info", Format: "text"},
		HTTP:    HTTPConfig{Listen: "127.0.0.1:9464"},
		Store:   defaultStore(),
		Streams: map[string]StreamConfig{
			"video":     {Scaling: localstream.ScalingPolicy{Type: localstream.ScaleByDataRate, MinSegments: 1, TargetRate: 4 << 20}},
			"telemetry": {Scaling: localstream.ScalingPolicy{Type: localstream.ScaleByEventRate, MinSegments: 1, TargetRate: 2000}},
			"health":    {Scaling: localstream.ScalingPolicy{Type: localstream.ScaleFixed, MinSegments: 1}},
		},
		Watermark: defaultWatermark(),
		Video:     VideoConfig{Enabled: true, Config: video.NewDefaultConfig()},
		Telemetry: TelemetryConfig{Enabled: true, Config: defaultTelemetry()},
		MAVLink:   MAVLinkConfig{Config: defaultMAVLink()},
		Central:   defaultCentral(),
		Live:      live.NewDefaultConfig(),
		Devices:   defaultDevices(),
	}
}

// defaultStore is localstream's defaults, with the agent's own
// FailedExitAfter (ValueLogFileSize 0: sized to the filesystem at start).
func defaultStore() StoreConfig {
	o := localstream.DefaultOptions()
	return StoreConfig{Durability: o.Durability.String(), SyncInterval: o.SyncInterval,
		GroupCommitWindow: o.GroupCommitWindow, MaxEventBytes: o.MaxEventBytes, QueueDepth: o.QueueDepth,
		MinFreeBytes: o.MinFreeBytes, FailedExitAfter: 30 * time.Second}
}

// defaultWatermark is watermark's defaults.
func defaultWatermark() WatermarkConfig {
	o := watermark.DefaultOptions()
	return WatermarkConfig{IdleTimeout: o.IdleTimeout, AllowedLateness: o.AllowedLateness,
		MaxClockSkew: o.MaxClockSkew, MaxClockBehind: o.MaxClockBehind}
}

// defaultCentral is the replicator's and nats-server's defaults (which
// the agent cannot read from a server: replicate.DefaultLimits) with the
// agent's embedded central, replicas and shutdown bound.
func defaultCentral() CentralConfig {
	r, l := replicate.NewDefaultReplicatorConfig(), replicate.DefaultLimits()
	prio := map[string]int{}
	for _, s := range []string{"telemetry", "health", "video"} {
		prio[s] = replicate.DefaultPriority(s)
	}
	return CentralConfig{URL: "embedded", Embedded: EmbeddedCentral{Listen: "127.0.0.1:4222"}, Replicas: 1,
		CommitInterval: r.CommitInterval, MaxTxnBytes: r.MaxTxnBytes,
		MaxBatchSize: l.MaxBatchSize, MaxBatchInflight: l.MaxBatchInflight, BatchTimeout: l.BatchTimeout,
		MaxControlLine: l.MaxControlLine, Priorities: prio, ShutdownTimeout: 5 * time.Second,
		UnreadyAfter: 5 * time.Minute}
}

// defaultDevices is the devices package's defaults.
func defaultDevices() DevicesConfig {
	r := devices.NewDefaultRegistryConfig()
	return DevicesConfig{HealthInterval: devices.NewDefaultHealthConfig().Interval, OfflineAfter: r.OfflineAfter,
		MaxDrones: r.MaxDrones, Disk: devices.NewDefaultPressureConfig()}
}

// defaultTelemetry is the telemetry package's defaults with the agent's
// broker.
func defaultTelemetry() telemetry.Config {
	c := telemetry.NewDefaultConfig()
	c.Broker = "tcp://127.0.0.1:1883"
	return c
}

// LoadConfig reads a YAML file over the defaults. Unknown keys are errors.
func LoadConfig(path string) (Config, error) {
	cfg := NewDefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := decodeYAML(b, &cfg); err != nil {
		return cfg, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if cfg.Telemetry.Listen != "" && !brokerSet(b) {
		cfg.Telemetry.Broker = "" // listen without a broker (see TelemetryConfig)
	}
	return cfg, nil
}

// brokerSet reports whether the YAML document sets telemetry.broker.
func brokerSet(doc []byte) bool {
	var v struct {
		Telemetry struct {
			Broker *string `yaml:"broker"`
		} `yaml:"telemetry"`
	}
	return yaml.Unmarshal(doc, &v) == nil && v.Telemetry.Broker != nil
}

// ListenWithoutDefaultBroker applies --mqtt-listen: the listen address, and
// the broker off unless set (brokerFlag, or a file that named one).
func (c *Config) ListenWithoutDefaultBroker(listen string, brokerFlag bool) {
	c.Telemetry.Listen = listen
	if !brokerFlag && c.Telemetry.Broker == defaultTelemetry().Broker {
		c.Telemetry.Broker = ""
	}
}

// Validate reports the first invalid field, naming it and the fix.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	if c.AgentID != "" && !agentIDRE.MatchString(c.AgentID) {
		return bad("agent_id", "%q must match %s (it becomes a NATS subject token)", c.AgentID, agentIDRE)
	}
	if c.DataDir == "" {
		return bad("data_dir", "required: a directory for the local store")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return bad("log.format", "%q: want text or json", c.Log.Format)
	}
	if err := c.Live.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Runtime.Procs < 0 {
		return bad("runtime.procs", "%d: want 0 (sized to the load) or the number of Ps", c.Runtime.Procs)
	}
	if c.HTTP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			return bad("http.listen", "%q: want HOST:PORT (e.g. 127.0.0.1:9464)", c.HTTP.Listen)
		}
	}
	if _, err := localstream.ParseDurability(c.Store.Durability); err != nil {
		return bad("store.durability", "%q: want always or periodic", c.Store.Durability)
	}
	if err := c.Store.validate(); err != nil {
		return err
	}
	for name, s := range c.Streams {
		if err := localstream.ValidateStreamName(name); err != nil {
			return bad("streams."+name, "invalid stream name: lower case letters, digits, _ and -")
		}
		if err := s.Scaling.Validate(); err != nil {
			return bad("streams."+name+".scaling", "%v", err)
		}
	}
	if c.Watermark.IdleTimeout < 0 && c.Watermark.IdleTimeout != -1 {
		return bad("watermark.idle_timeout", "must be positive (or -1 to disable)")
	}
	if c.Watermark.AllowedLateness < 0 {
		return bad("watermark.allowed_lateness", "must not be negative")
	}
	if c.Watermark.MaxClockSkew <= 0 && c.Watermark.MaxClockSkew != -1 {
		return bad("watermark.max_clock_skew", "must be positive (or -1 to disable)")
	}
	if c.Watermark.MaxClockBehind <= 0 && c.Watermark.MaxClockBehind != -1 {
		return bad("watermark.max_clock_behind", "must be positive (or -1 to disable)")
	}
	if c.Video.Enabled {
		if err := c.Video.Config.Validate(); err != nil {
			return nested("video", err, video.ErrConfig)
		}
	} else if len(c.Video.Sources) > 0 {
		return bad("video.sources", "%d RTSP sources while video.enabled is false: enable video, or remove them", len(c.Video.Sources))
	}
	if c.Telemetry.Enabled {
		if c.Telemetry.Listen != "" {
			if _, _, err := net.SplitHostPort(c.Telemetry.Listen); err != nil {
				return bad("telemetry.listen", "%q: want HOST:PORT (e.g. 0.0.0.0:1883)", c.Telemetry.Listen)
			}
		}
		if c.Telemetry.MaxConnections < 0 {
			return bad("telemetry.max_connections", "%d is negative: use a count such as 256", c.Telemetry.MaxConnections)
		}
		if u, err := url.Parse(c.Telemetry.Broker); (c.Telemetry.Broker != "" || c.Telemetry.Listen == "") && (err != nil || u.Host == "") {
			return bad("telemetry.broker", "%q: want a URL such as tcp://127.0.0.1:1883 (or set telemetry.listen)", RedactURLs(c.Telemetry.Broker))
		}
		if len(c.Telemetry.Topics) == 0 {
			return bad("telemetry.topics", "at least one topic pattern such as drones/{drone}/telemetry/#")
		}
		if err := c.Telemetry.checkTopics(); err != nil {
			return err
		}
		if c.Telemetry.PasswordFile != "" && c.Telemetry.PasswordEnv != "" {
			return bad("telemetry.password_file", "set password_file or password_env, not both")
		}
		if (c.Telemetry.CertFile == "") != (c.Telemetry.KeyFile == "") {
			return bad("telemetry.cert_file", "a client certificate needs both cert_file and key_file")
		}
	}
	if err := c.MAVLink.validate(); err != nil {
		return err
	}
	if err := c.Central.validate(); err != nil {
		return err
	}
	if c.Devices.HealthInterval < 0 || c.Devices.OfflineAfter < 0 || c.Devices.MaxDrones < 0 {
		return bad("devices", "health_interval, offline_after and max_drones must not be negative")
	}
	d := c.Devices.Disk
	if err := d.Validate(); err != nil {
		return nested("devices.disk", err, devices.ErrConfig)
	}
	if d.ShedBelow.Percent == 0 && d.ShedBelow.Bytes > 0 && d.ShedBelow.Bytes <= c.Store.MinFreeBytes {
		return bad("devices.disk.shed_below", "%d bytes must be above store.min_free_bytes %d, or appends fail before shedding starts", d.ShedBelow.Bytes, c.Store.MinFreeBytes)
	}
	return nil
}

func (c StoreConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: store.%s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.MaxEventBytes < 0:
		return bad("max_event_bytes", "%d is negative: use a size such as 4194304 (4 MiB), or 0 for the default", c.MaxEventBytes)
	case c.QueueDepth < 0:
		return bad("queue_depth", "%d is negative: use a count such as 8192, or 0 for the default", c.QueueDepth)
	case c.SyncInterval < 0:
		return bad("sync_interval", "%v is negative: use a duration such as 1s", c.SyncInterval)
	case c.GroupCommitWindow < 0 || c.GroupCommitWindow > time.Second:
		return bad("group_commit_window", "%v: want 0 (off) to 1s, such as 1ms", c.GroupCommitWindow)
	case c.MinFreeBytes < 0:
		return bad("min_free_bytes", "%d is negative: the floor cannot be turned off; use a size such as 134217728 (128 MiB), below the filesystem's size", c.MinFreeBytes)
	case c.FailedExitAfter < 0:
		return bad("failed_exit_after", "%v is negative: use a duration such as 30s, or 0 to exit after the final commit", c.FailedExitAfter)
	case c.ValueLogFileSize < 0:
		return bad("value_log_file_size", "%d is negative: use a size such as 16777216 (16 MiB), or 0 for the default", c.ValueLogFileSize)
	}
	if v := c.ValueLogFileSize; v != 0 {
		maxEvent := int64(c.MaxEventBytes)
		if maxEvent == 0 {
			maxEvent = 4 << 20
		}
		if v < 2*maxEvent || v >= 2<<30 {
			return bad("value_log_file_size", "%d: want at least 2 × max_event_bytes (%d) and below 2 GiB", v, 2*maxEvent)
		}
	}
	return nil
}

// CheckDisk checks the store and disk-pressure thresholds against the
// filesystem holding data_dir (free and total bytes): a floor at or above
// the filesystem's size refuses every append from the start, and a shed
// threshold at or below the floor never sheds before appends are refused.
func (c Config) CheckDisk(total int64) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	floor := c.Store.MinFreeBytes
	if floor == 0 {
		floor = 128 << 20 // the store's default
	}
	if floor >= total {
		return bad("store.min_free_bytes", "%d is not below the size of the filesystem holding %s (%d bytes): every append would be refused; lower it (e.g. to %d, 5%% of the filesystem)",
			floor, c.DataDir, total, total/20)
	}
	d := c.Devices.Disk
	if shed := d.ShedBelow.Resolve(total); shed <= floor {
		return bad("devices.disk.shed_below", "%s is %d bytes of this %d-byte filesystem, not above store.min_free_bytes %d: appends would be refused before shedding frees space; raise shed_below or lower min_free_bytes",
			d.ShedBelow, shed, total, floor)
	}
	return nil
}

// filesystemSize returns the size of the filesystem holding dir (or its
// nearest existing parent: dir is created later).
func filesystemSize(dir string) (int64, error) {
	orig := dir
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil && st.Blocks == 0 {
			// /proc, /sys: no disk at all (and min_free_bytes is not the problem).
			return 0, fmt.Errorf("%w: data_dir: %s is on a filesystem with no space at all (%s: not a disk, as /proc or /sys): choose a directory on a disk",
				ErrConfig, orig, dir)
		}
		if err == nil {
			return int64(st.Blocks) * int64(st.Bsize), nil // Bsize is int32 on 32-bit ARM
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, unix.ENOENT) || parent == dir {
			return 0, fmt.Errorf("data_dir %s: %w", dir, err)
		}
		dir = parent
	}
}

// valueLogFileSize resolves store.value_log_file_size (0: auto, see StoreConfig).
func (c StoreConfig) valueLogFileSize(fsSize int64) int64 {
	if c.ValueLogFileSize > 0 {
		return c.ValueLogFileSize
	}
	maxEvent := int64(c.MaxEventBytes)
	if maxEvent == 0 {
		maxEvent = 4 << 20
	}
	return min(max(fsSize/16, 2*maxEvent), 64<<20)
}

func (c CentralConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.URL == "", c.URL == "embedded":
	default:
		for _, u := range c.URLs() {
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "nats" && pu.Scheme != "tls") || pu.Host == "" {
				return bad("central.url", "%q: want embedded or nats://host:port[,nats://...]", RedactURLs(u))
			}
		}
	}
	if c.URL == "embedded" {
		if _, _, err := net.SplitHostPort(c.Embedded.Listen); err != nil {
			return bad("central.embedded.listen", "%q: want HOST:PORT", c.Embedded.Listen)
		}
	}
	if c.Layout < 0 || c.Layout > 2 {
		return bad("central.layout", "%d: want 2 (packed), 1 (a message per event) or 0 (the default, 2)", c.Layout)
	}
	if c.MaxTxnEvents < 0 || c.EffectiveLayout() == 1 && c.MaxTxnEvents > 999 || c.MaxTxnEvents > 100_000 {
		return bad("central.max_txn_events", "%d: want 0 (the layout's bound) or 1..999 for layout 1 (the server's batch limit is 1000 with the commit record), 1..100000 for layout 2", c.MaxTxnEvents)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return bad("central.replicas", "%d: want 1..5", c.Replicas)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if c.CommitInterval <= 0 || c.CommitInterval > 5*time.Second {
		return bad("central.commit_interval", "%v: want a duration in (0, 5s]", c.CommitInterval)
	}
	if c.UplinkBytesPerSec < 0 {
		return bad("central.uplink_bytes_per_sec", "must not be negative (0 = unlimited)")
	}
	if c.UnreadyAfter < 0 {
		return bad("central.unready_after", "%v: must not be negative (0: /readyz fails as soon as the centre is away)", c.UnreadyAfter)
	}
	auth := 0
	for _, set := range []bool{c.CredsFile != "", c.NkeySeedFile != "", c.User != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		return bad("central.creds_file", "use one of creds_file, nkey_seed_file, user")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return bad("central.cert_file", "a client certificate needs both cert_file and key_file")
	}
	return nil
}

// URLs splits URL into its comma-separated server URLs.
func (c CentralConfig) URLs() []string {
	var out []string
	for u := range strings.SplitSeq(c.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// validateLimits checks the central server's limits and the settings that
// must stay below them.
func (c CentralConfig) validateLimits() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.MaxBatchSize < 2:
		return bad("central.max_batch_size", "%d: want at least 2 (an event and the commit record; the server's default is 1000)", c.MaxBatchSize)
	case c.MaxBatchInflight < 1:
		return bad("central.max_batch_inflight", "%d: want at least 1 (the server's default is 50)", c.MaxBatchInflight)
	case c.BatchTimeout <= 0:
		return bad("central.batch_timeout", "%v: want a positive duration (the server's default is 10s)", c.BatchTimeout)
	case c.MaxControlLine < 512:
		return bad("central.max_control_line", "%d: want at least 512 (the server's default is 4096)", c.MaxControlLine)
	case c.EffectiveLayout() == 1 && c.MaxTxnEvents >= c.MaxBatchSize:
		return bad("central.max_txn_events", "%d: want at most central.max_batch_size − 1 = %d (the commit record is in the batch too)", c.MaxTxnEvents, c.MaxBatchSize-1)
	case 2*c.CommitInterval >= c.BatchTimeout:
		return bad("central.commit_interval", "%v: want below half of central.batch_timeout %v (the server drops a batch open that long)", c.CommitInterval, c.BatchTimeout)
	}
	return nil
}

// serverLimits are the configured central limits for the sink.
func (c CentralConfig) serverLimits() replicate.Limits {
	return replicate.Limits{MaxBatchSize: c.MaxBatchSize, MaxBatchInflight: c.MaxBatchInflight,
		BatchTimeout: c.BatchTimeout, MaxControlLine: c.MaxControlLine}
}
