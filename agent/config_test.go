package agent

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/devices"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/localstream"
)

// The documented example holds exactly the defaults.
func TestExampleIsDefaults(t *testing.T) {
	got, err := LoadConfig(filepath.Join("..", "agent.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := NewDefaultConfig()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("agent.example.yaml differs from NewDefaultConfig:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestGoldenConfig(t *testing.T) {
	got, err := LoadConfig(filepath.Join("testdata", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := NewDefaultConfig()
	want.AgentID = "ground-7"
	want.DataDir = "/srv/edge"
	want.Log = LogConfig{Level: "debug", Format: "json"}
	want.Store.Durability = "periodic"
	want.Store.SyncInterval = 250 * time.Millisecond
	want.Streams["telemetry"] = StreamConfig{Scaling: localstream.ScalingPolicy{Type: localstream.ScaleByEventRate,
		MinSegments: 2, TargetRate: 500, Factor: 3, Window: 5 * time.Second, Cooldown: 20 * time.Second}}
	want.Watermark.IdleTimeout = 10 * time.Second
	want.Video.Listen = "0.0.0.0:6000"
	want.Video.PayloadTypes = map[uint8]video.Codec{96: video.CodecH264, 98: video.CodecH265}
	want.Video.Drones = []video.DroneConfig{{ID: "drone-1", Addr: "10.1.0.11", SSRC: 0x1234}}
	want.Video.ChunkMaxDuration = time.Second
	want.Telemetry.Broker = "ssl://mqtt.local:8883"
	want.Telemetry.Topics = []string{"fleet/{drone}/tm/#", "mav/{drone}/raw"}
	want.Telemetry.CAFile = "/etc/edge/ca.pem"
	want.Telemetry.PasswordEnv = "MQTT_PASSWORD"
	want.Telemetry.Username = "edge"
	want.Central.URL = "nats://c1:4222,nats://c2:4222,nats://c3:4222"
	want.Central.Replicas = 3
	want.Central.CredsFile = "/etc/edge/agent.creds"
	want.Central.UplinkBytesPerSec = 1250000
	want.Devices.Disk.RetainBelow = devices.Threshold{Bytes: 4 << 30}
	want.Devices.Disk.ShedBelow = devices.Threshold{Bytes: 2 << 30}
	want.Devices.Disk.Policy = []devices.ShedRule{{Stream: "video", AllowUnreplicated: true}, {Stream: "telemetry"}}
	want.Runtime.Procs = 2
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("golden config:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if u := got.Central.URLs(); len(u) != 3 || u[2] != "nats://c3:4222" {
		t.Fatalf("URLs() = %v", u)
	}
}

// Each invalid field gives a message that names it and the fix.
func TestConfigErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"agent_id: 'a b'", "agent_id: \"a b\" must match"},
		{"data_dir: ''", "data_dir: required"},
		{"log: {level: loud}", "log.level: \"loud\": want debug, info, warn or error"},
		{"log: {format: xml}", "log.format: \"xml\": want text or json"},
		{"http: {listen: nowhere}", "http.listen: \"nowhere\": want HOST:PORT"},
		{"store: {durability: sometimes}", "store.durability: \"sometimes\": want always or periodic"},
		{"streams: {Bad: {}}", "streams.Bad: invalid stream name"},
		{"streams: {video: {scaling: {type: by_event_rate}}}", "streams.video.scaling: localstream: scaling.target_rate must be > 0"},
		{"watermark: {allowed_lateness: -1s}", "watermark.allowed_lateness: must not be negative"},
		{"video: {listen: 'x'}", "video:"},
		{"video: {sources: [{url: 'rtsp://cam/x', drone: d1}, {url: 'rtsp://cam/y', drone: d1}]}", "video: sources[1].drone: \"d1\" is already a drone or a source"},
		{"video: {sources: [{url: 'rtsp://u:pw@cam/x', drone: d}], source_reconnect_min: 2s, source_reconnect_max: 1s}", "video: source_reconnect_min: 2s to 1s"},
		{"video: {enabled: false, sources: [{url: 'rtsp://cam/x', drone: d}]}", "video.sources: 1 RTSP sources while video.enabled is false"},
		{"telemetry: {broker: 'not a url'}", "telemetry.broker: \"not a url\": want a URL"},
		{"telemetry: {topics: []}", "telemetry.topics: at least one topic pattern"},
		{"telemetry: {password_file: f, password_env: E}", "telemetry.password_file: set password_file or password_env, not both"},
		{"telemetry: {cert_file: c}", "telemetry.cert_file: a client certificate needs both"},
		{"central: {url: 'http://x'}", "central.url: \"http://x\": want embedded or nats://"},
		{"central: {embedded: {listen: x}}", "central.embedded.listen: \"x\": want HOST:PORT"},
		{"central: {layout: 1, max_txn_events: 1000}", "central.max_txn_events: 1000: want 0 (the layout's bound) or 1..999 for layout 1"},
		{"central: {max_txn_events: 100001}", "central.max_txn_events: 100001: want 0"},
		{"central: {layout: 3}", "central.layout: 3: want 2"},
		{"central: {replicas: 0}", "central.replicas: 0: want 1..5"},
		{"central: {commit_interval: 0s}", "central.commit_interval: 0s: want a duration in (0, 5s]"},
		{"central: {creds_file: a, user: u}", "central.creds_file: use one of creds_file, nkey_seed_file, user"},
		{"devices: {disk: {retain_below: 1GiB, shed_below: 2GiB}}", "devices.disk: disk_pressure.shed_below 2147483648 must be below retain_below"},
		{"devices: {disk: {policy: [{stream: video}, {stream: video}]}}", "listed twice"},
		{"devices: {disk: {retain_below: 2GiB, shed_below: 1GiB}}\nstore: {min_free_bytes: 2000000000}", "devices.disk.shed_below: 1073741824 bytes must be above store.min_free_bytes"},
		{"store: {min_free_bytes: -1}", "store.min_free_bytes: -1 is negative: the floor cannot be turned off"},
		{"store: {max_event_bytes: -5}", "store.max_event_bytes: -5 is negative"},
		{"store: {queue_depth: -1}", "store.queue_depth: -1 is negative"},
		{"store: {sync_interval: -1s}", "store.sync_interval: -1s is negative"},
		{"store: {group_commit_window: -1ms}", "store.group_commit_window: -1ms: want 0 (off) to 1s"},
		{"store: {value_log_file_size: -1}", "store.value_log_file_size: -1 is negative"},
		{"store: {value_log_file_size: 1048576}", "store.value_log_file_size: 1048576: want at least 2 × max_event_bytes (8388608)"},
		{"devices: {offline_after: -1s}", "devices: health_interval, offline_after and max_drones must not be negative"},
		{"runtime: {procs: -1}", "runtime.procs: -1: want 0 (sized to the load) or the number of Ps"},
		{"unknown_key: 1", "line 1: unknown_key: unknown key at the top level; the keys there are agent_id, central,"},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "a.yaml")
		os.WriteFile(path, []byte(c.yaml+"\n"), 0o644)
		cfg, err := LoadConfig(path)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant containing %q", c.yaml, err, c.want)
		}
	}
}

func TestAgentIDPersisted(t *testing.T) {
	dir := t.TempDir()
	id, err := ResolveAgentID("", dir)
	if err != nil || !agentIDRE.MatchString(id) {
		t.Fatalf("generated %q %v", id, err)
	}
	again, _ := ResolveAgentID("", dir)
	if again != id {
		t.Fatalf("second start got %q, first %q", again, id)
	}
	if got, _ := ResolveAgentID("fixed", dir); got != "fixed" {
		t.Fatal("configured id not used")
	}
}

// A floor the filesystem cannot give, or a shed threshold at or below it,
// is refused at start naming the field (a 64 MiB filesystem with the
// defaults refused every append while /healthz said ok).
func TestCheckDisk(t *testing.T) {
	const mib = 1 << 20
	cfg := NewDefaultConfig()
	if err := cfg.CheckDisk(64 * mib); err == nil || !errors.Is(err, ErrConfig) ||
		!strings.Contains(err.Error(), "store.min_free_bytes: 134217728 is not below the size of the filesystem") {
		t.Fatalf("default floor on 64 MiB: %v", err)
	}
	cfg.Store.MinFreeBytes = 8 * mib // shed_below 10% = 6.4 MiB: below the floor
	if err := cfg.CheckDisk(64 * mib); err == nil || !strings.Contains(err.Error(), "devices.disk.shed_below: 10% is 6710886 bytes") {
		t.Fatalf("shed below the floor: %v", err)
	}
	cfg.Store.MinFreeBytes = 4 * mib
	if err := cfg.CheckDisk(64 * mib); err != nil {
		t.Fatalf("workable: %v", err)
	}
	if err := NewDefaultConfig().CheckDisk(64 << 30); err != nil {
		t.Fatalf("defaults on 64 GiB: %v", err)
	}
	for _, c := range []struct{ set, fs, want int64 }{{0, 64 * mib, 8 * mib}, {0, 4 << 30, 64 * mib}, {0, 512 * mib, 32 * mib}, {16 * mib, 64 * mib, 16 * mib}} {
		if got := (StoreConfig{MaxEventBytes: 4 * mib, ValueLogFileSize: c.set}).valueLogFileSize(c.fs); got != c.want {
			t.Errorf("value_log_file_size %d on %d: %d, want %d", c.set, c.fs, got, c.want)
		}
	}
}

// TestListenTurnsTheDefaultBrokerOff: with telemetry.listen set, the broker
// is off unless the file (or --mqtt-broker) names one.
func TestListenTurnsTheDefaultBrokerOff(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) Config {
		t.Helper()
		p := filepath.Join(dir, "a.yaml")
		if err := os.WriteFile(p, []byte("data_dir: "+dir+"\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := load("telemetry: {listen: '127.0.0.1:1884'}\n"); c.Telemetry.Broker != "" {
		t.Fatalf("listen alone: broker %q", c.Telemetry.Broker)
	}
	if c := load("telemetry: {listen: '127.0.0.1:1884', broker: 'tcp://127.0.0.1:1883'}\n"); c.Telemetry.Broker != "tcp://127.0.0.1:1883" {
		t.Fatalf("both: broker %q", c.Telemetry.Broker)
	}
	if c := load(""); c.Telemetry.Broker != "tcp://127.0.0.1:1883" {
		t.Fatalf("neither: broker %q", c.Telemetry.Broker)
	}
	c := load("")
	c.ListenWithoutDefaultBroker("127.0.0.1:1884", false)
	if c.Telemetry.Broker != "" || c.Telemetry.Listen != "127.0.0.1:1884" {
		t.Fatalf("--mqtt-listen: %+v", c.Telemetry.Config)
	}
	c = load("")
	c.Telemetry.Listen, c.Telemetry.Broker = "", ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "telemetry.broker") {
		t.Fatalf("neither broker nor listen: %v", err)
	}
}

// TestLayoutTwoByDefault: layout 2 is written by default with a central URL
// as with the embedded central (issue 31); layout 1 only when asked for.
func TestLayoutTwoByDefault(t *testing.T) {
	for _, c := range []struct {
		url    string
		layout int
		want   int
	}{{"embedded", 0, 2}, {"nats://central.example:4222", 0, 2}, {"nats://central.example:4222", 1, 1}, {"embedded", 1, 1}} {
		cfg := NewDefaultConfig()
		cfg.Central.URL, cfg.Central.Layout = c.url, c.layout
		if got := cfg.Central.EffectiveLayout(); got != c.want {
			t.Errorf("url %s layout %d: writes layout %d, want %d", c.url, c.layout, got, c.want)
		}
	}
}

// TestDataDirNotADisk: a data directory on a filesystem with no blocks
// (/proc) is refused as a data_dir problem, not as store.min_free_bytes
// being above the filesystem's size.
func TestDataDirNotADisk(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.DataDir = "/proc/nope"
	_, err := New(cfg, nil)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "data_dir") || strings.Contains(err.Error(), "min_free_bytes") {
		t.Fatalf("err = %v", err)
	}
}
