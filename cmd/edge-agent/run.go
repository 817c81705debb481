package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/procs"
)

func init() {
	commands["run"] = command{
		summary: "run the agent (video + telemetry capture, replication, HTTP endpoints)",
		run:     runAgent,
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// fileAndEnvConfig is the configuration of a file (path, "" for none)
// over the defaults, with the EDGE_AGENT_ environment variables over it.
func fileAndEnvConfig(path string) (agent.Config, error) {
	cfg := agent.NewDefaultConfig()
	if path != "" {
		// The file's URLs are secrets before it is decoded: a YAML error
		// may quote a line.
		if b, err := os.ReadFile(path); err == nil {
			secrets.AddURLs(string(b))
		}
		var err error
		if cfg, err = agent.LoadConfig(path); err != nil {
			return cfg, usageError{err}
		}
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, agent.EnvPrefix) {
			secrets.AddURLs(kv)
		}
	}
	if err := cfg.ApplyEnv(os.Environ()); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// loadAgentConfig reads --config (when given), the environment
// (EDGE_AGENT_...) and applies the flags that were set: flag >
// environment > file > default.
func loadAgentConfig(fs *flag.FlagSet, args []string) (agent.Config, error) {
	path := fs.String("config", "", "YAML configuration file (see agent.example.yaml)")
	dataDir := fs.String("data-dir", "", "data directory (overrides data_dir)")
	agentID := fs.String("agent-id", "", "agent id (overrides agent_id)")
	rtp := fs.String("rtp-listen", "", "RTP listen HOST:PORT, RTCP on the next port (overrides video.listen)")
	broker := fs.String("mqtt-broker", "", "MQTT broker URL (overrides telemetry.broker)")
	mqttListen := fs.String("mqtt-listen", "", "HOST:PORT of the MQTT server for drones publishing straight to the agent (overrides\n"+
		"telemetry.listen); without --mqtt-broker (or a broker in the file) no broker is used")
	var topics stringList
	fs.Var(&topics, "mqtt-topic", "MQTT topic `PATTERN`, repeatable (overrides telemetry.topics): the drone id is the level\n"+
		"written {drone}, or the single + level: drones/+/telemetry and drones/{drone}/telemetry/# both work;\n"+
		"with {drone}, other + levels match anything; # only as the last level")
	var rtspSources stringList
	fs.Var(&rtspSources, "rtsp-source", "RTSP camera to pull video from, `DRONE=URL`, repeatable (overrides video.sources):\n"+
		"drone-1=rtsp://10.0.0.11:554/stream, with user:password@ before the host when the camera asks (rtsps:// too;\n"+
		"the password is never shown)")
	centralURL := fs.String("central", "", "central JetStream: nats://host:port[,...] or embedded (overrides central.url)")
	layout := fs.Int("central-layout", 0, "central layout written: 2 (packed, the default), 1 (a message per event) (overrides central.layout)")
	httpListen := fs.String("http-listen", "", "HTTP HOST:PORT for /metrics, /healthz, /status (overrides http.listen)")
	logFormat := fs.String("log-format", "", "text or json (overrides log.format)")
	pprof := fs.Bool("pprof", false, "serve /debug/pprof on the HTTP listener (overrides http.pprof)")
	takeover := fs.Bool("takeover", false, "take over this agent id's central chains even when another store (a twin, a copy of this one) wrote them last; the other store is fenced")
	if err := parseFlags(fs, args); err != nil {
		return agent.Config{}, err
	}
	cfg, err := fileAndEnvConfig(*path)
	if err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if global.logFormat != "" && !set["log-format"] {
		cfg.Log.Format = global.logFormat // edge-agent --log-format json run
	}
	if set["data-dir"] {
		cfg.DataDir = *dataDir
	}
	if set["agent-id"] {
		cfg.AgentID = *agentID
	}
	if set["rtp-listen"] {
		cfg.Video.Listen = *rtp
		cfg.Video.RTCPListen = ""
	}
	if set["mqtt-broker"] {
		cfg.Telemetry.Broker = *broker
	}
	if set["mqtt-listen"] {
		cfg.ListenWithoutDefaultBroker(*mqttListen, set["mqtt-broker"])
	}
	if len(topics) > 0 {
		cfg.Telemetry.Topics = topics
	}
	if len(rtspSources) > 0 {
		cfg.Video.Sources = nil
		for _, s := range rtspSources {
			drone, u, ok := strings.Cut(s, "=")
			if !ok {
				return cfg, usageError{fmt.Errorf("%w: --rtsp-source: want DRONE=URL (e.g. drone-1=rtsp://10.0.0.11:554/stream)", agent.ErrConfig)}
			}
			cfg.Video.Sources = append(cfg.Video.Sources, video.SourceConfig{Drone: drone, URL: u})
		}
	}
	if set["central"] {
		cfg.Central.URL = *centralURL
	}
	if set["central-layout"] {
		cfg.Central.Layout = *layout
	}
	if set["http-listen"] {
		cfg.HTTP.Listen = *httpListen
	}
	if set["log-format"] {
		cfg.Log.Format = *logFormat
	}
	if set["pprof"] {
		cfg.HTTP.Pprof = *pprof
	}
	cfg.Central.Takeover = *takeover
	secrets.AddConfig(cfg) // password files and variables, before any message quotes them
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	cfg, err := loadAgentConfig(fs, args)
	if err != nil {
		return err
	}
	log := agent.NewLogger(cfg.Log, stderr)
	a, err := agent.New(cfg, log)
	if err != nil {
		if errors.Is(err, agent.ErrConfig) {
			return usageError{err}
		}
		return err
	}
	defer startProcs(cfg.Runtime, a, log)()
	defer notifySystemd(ctx, a, log)()
	if path := os.Getenv("EDGE_AGENT_CPUPROFILE"); path != "" {
		// Profiling a run (BENCHMARKS.md, CPU per event): written at
		// a graceful stop.
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	if err := a.Run(ctx); err != nil {
		if errors.Is(err, agent.ErrConfig) {
			return usageError{err}
		}
		return fmt.Errorf("agent %s: %w", a.ID(), err)
	}
	return nil
}

// startProcs sizes GOMAXPROCS for the run to the agent's load (package
// procs) unless runtime.procs or the GOMAXPROCS environment variable fixes
// it; the returned func stops the sizing.
func startProcs(cfg agent.RuntimeConfig, a *agent.Agent, log *slog.Logger) (stop func()) {
	switch {
	case cfg.Procs > 0:
		runtime.GOMAXPROCS(cfg.Procs)
		fallthrough
	case os.Getenv("GOMAXPROCS") != "":
		a.ReportProcs(procs.Fixed)
		return func() {}
	}
	c := procs.New(procs.Config{Logger: log})
	a.ReportProcs(c.Stats)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() { cancel(); <-done }
}
