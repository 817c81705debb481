package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/mavlink"
	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/ingest/video"
	"github.com/edge-agent/edge-agent/live"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/procs"
	"github.com/edge-agent/edge-agent/replicate"
	"github.com/edge-agent/edge-agent/watermark"
)

// Agent wires the parts: the local store and its streams, the watermark
// trackers, video and telemetry intake, host health, replication to the
// centre (optionally an embedded central server) and the HTTP endpoints.
// It owns the process lifecycle: Run starts everything and, when ctx
// ends, stops in pipeline order — intake, local flush, final commit,
// central connection, embedded central, store.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	id       string
	instance string // random per run: marks this run's commit records

	ready   chan struct{}
	started time.Time
	// vlogFileSize is store.value_log_file_size resolved for the filesystem.
	vlogFileSize int64

	// storePtr is store for Run's stop deadline, which runs beside run.
	storePtr atomic.Pointer[localstream.Store]

	// Set during Run before ready is closed; read-only afterwards.
	store    *localstream.Store
	streams  map[string]*localstream.Stream
	trackers map[string]*watermark.Tracker
	central  *central.Server
	nc       *nats.Conn
	sink     *replicate.JetStreamSink
	repl     *replicate.Replication
	// uplink is the cap shared by the backlog and the live lane, metered
	// on the central connection (nil without central).
	uplink *replicate.Uplink
	// outage is the one record of the central connection — up, or away
	// since when and why — that /readyz, /status and the page read;
	// wire samples the uplink's bytes sent for its rate (/status uplink).
	outage   *replicate.Outage
	wire     wireRate
	lane     *live.Lane
	video    *video.Ingest
	telem    *telemetry.Ingester
	mavlink  *mavlink.Intake
	devices  *deviceParts
	httpAddr string

	// red removes the configured secrets from logs, errors and responses.
	red *Redactor
	// history is the last minutes of each stream's lags and backlog, for the page.
	history history
	// lastSample is when sampleHistory last ran (unix ns), for Alive.
	lastSample atomic.Int64

	// mu guards errs and procs.
	mu    sync.Mutex
	errs  map[string]string  // component → last error, for /status
	procs func() procs.Stats // how the process sizes GOMAXPROCS (ReportProcs)
}

// ReportProcs makes /status and /metrics show how the process sizes
// GOMAXPROCS (package procs): `edge-agent run` does that, not the Agent,
// as GOMAXPROCS is the whole process's.
func (a *Agent) ReportProcs(stats func() procs.Stats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.procs = stats
}

// New checks the configuration and resolves the agent id. It starts nothing.
// Every log line, error and response of the agent leaves without the
// configured secrets.
func New(cfg Config, logger *slog.Logger) (*Agent, error) {
	red := newRedactor(cfg)
	if err := cfg.Check(); err != nil {
		return nil, red.Error(err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	fsSize, err := filesystemSize(cfg.DataDir)
	if err != nil {
		return nil, red.Error(err)
	}
	if err := cfg.CheckDisk(fsSize); err != nil {
		return nil, red.Error(err)
	}
	logger = slog.New(red.Handler(logger.Handler()))
	id, err := ResolveAgentID(cfg.AgentID, cfg.DataDir)
	if err != nil {
		return nil, red.Error(err)
	}
	var r [6]byte
	rand.Read(r[:])
	return &Agent{cfg: cfg, log: logger.With("agent", id), id: id, instance: hex.EncodeToString(r[:]),
		ready: make(chan struct{}), errs: map[string]string{}, vlogFileSize: cfg.Store.valueLogFileSize(fsSize), red: red}, nil
}

// ID returns the agent id.
func (a *Agent) ID() string { return a.id }

// Ready is closed once every part is running.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// HTTPAddr is the bound HTTP address (after Ready; empty when disabled).
func (a *Agent) HTTPAddr() string { return a.httpAddr }

// CentralURL is the URL of the central server in use, without
// credentials: the connected server, else the configured ones (after
// Ready; "" without central).
func (a *Agent) CentralURL() string {
	nc := a.centralConn()
	if nc == nil {
		return ""
	}
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	return RedactURLs(strings.Join(nc.Servers(), ","))
}

// centralConn is the central connection in use: the sink's (it replaces
// a connection closed for good), nil without central.
func (a *Agent) centralConn() *nats.Conn {
	if a.sink != nil {
		return a.sink.Conn()
	}
	return a.nc
}

// VideoAddr is the bound RTP address (after Ready; nil when disabled).
func (a *Agent) VideoAddr() net.Addr {
	if a.video == nil {
		return nil
	}
	return a.video.Addr()
}

// TelemetryListenAddr is the telemetry listener's address (nil when it is
// off, or not yet bound).
func (a *Agent) TelemetryListenAddr() net.Addr {
	if a.telem == nil {
		return nil
	}
	if addr := a.telem.ListenAddr(); addr != nil {
		return addr
	}
	return nil
}

// Store returns the local store (after Ready).
func (a *Agent) Store() *localstream.Store { return a.store }

func (a *Agent) setErr(component string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs[component] = a.red.String(err.Error())
}

// StopBound is how long the shutdown may take beyond
// central.shutdown_timeout (the final commit's deadline): stopping intake
// and the HTTP server, closing the central connection and the store (whose
// Close gives up on Badger after localstream's CloseTimeout, 3 s).
const StopBound = 5 * time.Second

// ErrStopTimeout: the shutdown did not finish within
// central.shutdown_timeout + StopBound.
var ErrStopTimeout = errors.New("shutdown did not finish within central.shutdown_timeout + 5s")

// Run runs the agent until ctx ends or a part fails, then shuts down in
// pipeline order. It returns nil after a clean shutdown, the store's error
// after its store failed (see StoreConfig.FailedExitAfter), and
// ErrStopTimeout when the shutdown did not finish within
// central.shutdown_timeout + StopBound of its start (a part stuck in a
// failing disk): the process should then exit, which ends what is stuck.
func (a *Agent) Run(ctx context.Context) error {
	stopping := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.run(ctx, stopping) }()
	select {
	case err := <-done:
		return a.red.Error(err)
	case <-stopping:
	}
	bound := a.cfg.Central.ShutdownTimeout + StopBound
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case err := <-done:
		return a.red.Error(err)
	case <-t.C:
		err := fmt.Errorf("%w: %v (store: %v)", ErrStopTimeout, bound, a.storeErr())
		a.log.Error("shutdown did not finish in time; exiting with parts still running", "err", a.red.Error(err))
		return a.red.Error(err)
	}
}

// storeErr is the store's error (nil before it opened, or while it works).
func (a *Agent) storeErr() error {
	if s := a.storePtr.Load(); s != nil {
		return s.Err()
	}
	return nil
}

func (a *Agent) run(ctx context.Context, stopping chan<- struct{}) (err error) {
	a.started = time.Now()
	var cleanup []func()
	var closeErr error // the store's Close
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
		// A store that failed while the agent stopped (its directory
		// removed under the final commit, found at the latest by its
		// Close) is a failure too: exit non-zero so that systemd restarts
		// the agent on a store it can open.
		if s := a.storePtr.Load(); err == nil && s != nil && s.Err() != nil {
			err = s.Err()
			a.log.Error("store failed while stopping: exiting with status 1 for a restart", "err", err)
		}
		// A store that did not close cleanly (Badger's files removed
		// under its Close, a close that timed out) is not a clean stop
		// either: systemd restarts the agent. A close without Badger's
		// flush for want of room is a deliberate stop (the log is synced
		// and replayed at the next start), not a failure.
		if err == nil && closeErr != nil && !errors.Is(closeErr, localstream.ErrDiskFull) {
			err = closeErr
			a.log.Error("store did not close cleanly: exiting with status 1", "err", err)
		}
	}()

	// Store, streams, trackers.
	if err := a.openStore(); err != nil {
		return err
	}
	a.storePtr.Store(a.store)
	cleanup = append(cleanup, func() {
		if closeErr = a.store.Close(); closeErr != nil {
			a.log.Error("closing store", "err", closeErr)
		}
	})

	// Central: embedded server and connection.
	if err := a.startCentral(); err != nil {
		return err
	}
	cleanup = append(cleanup, a.stopCentral)

	// Replication runs until the final commit after intake stopped. A
	// stream stopped by a permanent error is logged and shown in /status.
	replCtx, stopRepl := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRepl()
	var replWG sync.WaitGroup
	if a.repl != nil {
		replWG.Go(func() { a.repl.Run(replCtx) })
	}
	if a.lane != nil {
		// The live lane runs as long as replication: a preview until the
		// final commit.
		replWG.Go(func() { a.lane.Run(replCtx) })
	}
	cleanup = append(cleanup, func() { stopRepl(); replWG.Wait() })

	// Intake: video, telemetry, devices. A failing part stops the agent.
	g, gctx := errgroup.WithContext(ctx)
	if err := a.startIntake(gctx, g); err != nil {
		return err
	}
	srv, err := a.startHTTP()
	if err != nil {
		return err
	}
	// The first sample before Ready: the agent is Alive (systemd's
	// watchdog) from the moment it says READY=1.
	a.sampleOnce()
	g.Go(func() error { return a.sampleHistory(gctx) })
	// A failed store stops intake: nothing more is acknowledged.
	g.Go(func() error {
		select {
		case <-a.store.Failed():
			return a.store.Err()
		case <-gctx.Done():
			return nil
		}
	})
	close(a.ready)
	a.log.Info("agent running", "data_dir", a.cfg.DataDir, "central", a.CentralURL(), "http", a.httpAddr,
		"video", a.VideoAddr(), "mqtt", a.cfg.Telemetry.Broker, "mqtt_listen", a.TelemetryListenAddr())
	a.warnOpenBinds()

	<-gctx.Done()
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopping) }) }
	if a.store.Err() == nil {
		stop()
	}
	// 1. intake
	intakeErr := g.Wait()
	if err := a.store.Err(); err != nil {
		// The store failed: alarm, replicate what is durable, then exit
		// non-zero (StoreConfig.FailedExitAfter).
		a.holdFailed(ctx, err)
		stop()
		intakeErr = err
	}
	// 2. local flush: writer marks
	for name, t := range a.trackers {
		if err := t.Flush(); err != nil {
			a.log.Warn("flushing watermark marks", "stream", name, "err", err)
		}
	}
	// 3. final commit within a deadline
	a.finalCommit()
	stopRepl()
	replWG.Wait()
	if srv != nil {
		shutCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(shutCtx)
		cancel()
	}
	// 4. central connection and 5. store: by the deferred cleanup.
	if intakeErr != nil && !errors.Is(intakeErr, context.Canceled) {
		return intakeErr
	}
	return nil
}

// holdFailed keeps the agent up after its store failed, intake stopped,
// for StoreConfig.FailedExitAfter or until ctx ends: /healthz says why,
// replication of what is durable goes on.
func (a *Agent) holdFailed(ctx context.Context, err error) {
	hold := a.cfg.Store.FailedExitAfter
	a.log.Error("store failed: intake stopped (the broker keeps the messages), replicating what is durable; exiting with status 1 for a restart",
		"err", err, "exit_in", hold.String())
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (a *Agent) openStore() error {
	dur, _ := localstream.ParseDurability(a.cfg.Store.Durability)
	window := a.cfg.Store.GroupCommitWindow
	if window == 0 {
		window = -1 // off in the config; 0 is the store's default
	}
	s, err := localstream.Open(filepath.Join(a.cfg.DataDir, "store"), localstream.Options{
		Durability: dur, SyncInterval: a.cfg.Store.SyncInterval, GroupCommitWindow: window,
		MaxEventBytes: a.cfg.Store.MaxEventBytes, QueueDepth: a.cfg.Store.QueueDepth,
		MinFreeBytes: a.cfg.Store.MinFreeBytes, Logger: a.log, ValueLogFileSize: a.vlogFileSize,
	})
	if err != nil {
		return err
	}
	a.store = s
	a.streams = map[string]*localstream.Stream{}
	a.trackers = map[string]*watermark.Tracker{}
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Streams)) {
		st, err := s.CreateStream(name, localstream.StreamConfig{Scaling: a.cfg.Streams[name].Scaling})
		if err != nil {
			s.Close()
			return err
		}
		tr, err := watermark.NewTracker(st, s, watermark.Options{IdleTimeout: a.cfg.Watermark.IdleTimeout,
			AllowedLateness: a.cfg.Watermark.AllowedLateness, MaxClockSkew: a.cfg.Watermark.MaxClockSkew,
			MaxClockBehind: a.cfg.Watermark.MaxClockBehind, Logger: a.log})
		if err != nil {
			s.Close()
			return err
		}
		a.streams[name], a.trackers[name] = st, tr
	}
	return nil
}

func (a *Agent) startCentral() error {
	c := a.cfg.Central
	if c.URL == "" {
		a.log.Warn("central.url is empty: capturing locally without replication")
		return nil
	}
	urls := c.URLs()
	if c.URL == "embedded" {
		dir := c.Embedded.DataDir
		if dir == "" {
			dir = filepath.Join(a.cfg.DataDir, "central")
		}
		// The embedded server's notices are many and routine: warnings up.
		quiet := slog.New(minLevel{a.log.Handler(), slog.LevelWarn})
		srv, err := central.New(central.Config{Listen: c.Embedded.Listen, DataDir: dir, Logger: quiet.With("part", "central")})
		if err != nil {
			return err
		}
		if err := srv.Start(); err != nil {
			var le *central.ListenError
			if errors.As(err, &le) {
				return fmt.Errorf("%w: central.embedded.listen: %s: %v (another server there?): choose another HOST:PORT", ErrConfig, le.Addr, le.Reason())
			}
			return err
		}
		a.central = srv
		urls = []string{srv.ClientURL()}
	}
	var password string
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return fmt.Errorf("%w: central.password_file: %w", ErrConfig, err)
		}
		password = strings.TrimSpace(string(b))
	}
	// One cap for the backlog and the live lane, which draws from it
	// first, inside its share (docs/live.md); charged with the bytes
	// written to the central connection (docs/sync.md).
	uplink := replicate.NewUplink(c.UplinkBytesPerSec)
	a.uplink, a.outage = uplink, &replicate.Outage{}
	nc, err := replicate.Connect(replicate.ConnConfig{URLs: urls, Name: "edge-agent " + a.id, CAFile: c.CAFile,
		CertFile: c.CertFile, KeyFile: c.KeyFile, CredsFile: c.CredsFile, NkeySeedFile: c.NkeySeedFile,
		User: c.User, Password: password, IgnoreDiscoveredServers: c.IgnoreDiscoveredServers,
		Dialer: uplink.Dialer(nil), Outage: a.outage}, a.log)
	if err != nil {
		return err
	}
	a.nc = nc
	if !nc.IsConnected() {
		// Connect returns at once and keeps retrying: say so, with the URL.
		a.log.Warn("central not reachable; capturing locally and retrying", "url", a.CentralURL())
	}
	sink, err := replicate.NewJetStreamSink(nc, a.id, a.instance, replicate.JetStreamOptions{Replicas: c.Replicas, Layout: c.EffectiveLayout(),
		Limits: c.serverLimits()})
	if err != nil {
		return err
	}
	a.sink = sink
	if err := a.checkIntakeLimits(sink.Limits()); err != nil {
		return err
	}
	// The station identity tells this station's replaced disk or restored
	// backup from another station with the same agent id (docs/sync.md).
	station, err := replicate.MachineStation()
	if err != nil {
		a.log.Warn("station identity unknown: a replaced disk or a restored backup waits for --takeover", "err", err)
	}
	a.repl = replicate.NewReplication(a.store, sink, replicate.ReplicationConfig{
		Instance: a.instance, Priorities: c.Priorities, Uplink: uplink,
		Template: replicate.ReplicatorConfig{MaxTxnEvents: c.MaxTxnEvents, MaxTxnBytes: c.MaxTxnBytes,
			CommitInterval: c.CommitInterval, Takeover: c.Takeover, Station: station},
		Streams: slices.Sorted(maps.Keys(a.streams)),
		Watermarks: func(name string) replicate.CommittedWatermarkFunc {
			return a.committedWatermark(name, a.trackers[name])
		},
		// MQTT redeliveries that a lost store had sent are not sent again
		// (replicate/repeats.go); only the telemetry stream has them.
		Repeats: func(name string) replicate.RepeatFunc {
			if name == "telemetry" {
				return telemetry.Repeat
			}
			return nil
		},
		Logger: a.log,
	})
	if a.cfg.Live.Enabled {
		lc := a.cfg.Live
		if lc.Replicas == 0 {
			lc.Replicas = c.Replicas
		}
		streams := make([]*localstream.Stream, 0, len(a.streams))
		for _, name := range slices.Sorted(maps.Keys(a.streams)) {
			streams = append(streams, a.streams[name])
		}
		lane, err := live.New(a.id, streams, lc, live.Options{Conn: sink.Conn, Uplink: uplink, Logger: a.log.With("part", "live"),
			Priority: func(stream string) int {
				if p, ok := c.Priorities[stream]; ok {
					return p
				}
				return replicate.DefaultPriority(stream)
			}})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		a.lane = lane
	}
	return nil
}

// checkIntakeLimits refuses intake settings that let one stored event be
// larger than a central message (docs/design.md rule 13): everything stored
// must be sendable. The max payload is the connected server's (else
// nats-server's default, 1 MiB).
func (a *Agent) checkIntakeLimits(l replicate.Limits) error {
	if a.cfg.Video.Enabled {
		if err := l.CheckIntake("video.chunk_max_bytes", int64(a.cfg.Video.ChunkMaxBytes)); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if a.cfg.Telemetry.Enabled {
		if err := l.CheckIntake("telemetry.max_payload", int64(a.cfg.Telemetry.MaxPayload)); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// committedWatermark gives the replicator of a stream its committed
// watermark (replicate.TrackerWatermark); a tracker error is logged and shown
// in /status.
func (a *Agent) committedWatermark(stream string, tr *watermark.Tracker) replicate.CommittedWatermarkFunc {
	return replicate.TrackerWatermark(tr, func(err error) {
		a.setErr("watermark/"+stream, err)
		a.log.Warn("committed watermark unavailable; the commit repeats the previous one", "stream", stream, "err", err)
	})
}

func (a *Agent) stopCentral() {
	if a.sink != nil {
		a.sink.Close()
	}
	if a.nc != nil {
		a.nc.Close()
	}
	if a.central != nil {
		a.central.Close()
	}
}

// finalCommit waits until every stream has committed its whole local
// backlog, or the shutdown timeout.
func (a *Agent) finalCommit() {
	if a.repl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Central.ShutdownTimeout)
	defer cancel()
	if err := a.repl.WaitCaughtUp(ctx); err != nil {
		a.log.Warn("shutdown: final commit incomplete; the backlog replicates on the next start", "err", err)
	}
}

func (a *Agent) startIntake(ctx context.Context, g *errgroup.Group) error {
	d, err := newDeviceParts(a)
	if err != nil {
		return err
	}
	a.devices = d
	if a.cfg.Telemetry.Enabled {
		if err := a.newTelemetry(d); err != nil {
			return err
		}
	}
	if a.cfg.MAVLink.Enabled {
		if err := a.newMAVLink(d); err != nil {
			return err
		}
	}
	d.start(ctx, g)
	if a.cfg.Video.Enabled {
		st, tr := a.streams["video"], a.trackers["video"]
		if st == nil {
			return fmt.Errorf("%w: video.enabled needs a streams.video entry", ErrConfig)
		}
		vcfg := a.cfg.Video.Config
		vcfg.MaxClockSkew = max(a.cfg.Watermark.MaxClockSkew, 0) // -1 (disabled) disables the SR check too
		vcfg.Logger = a.log.With("part", "video")
		in, err := video.New(vcfg, video.Sink{Stream: d.videoSink(st), Marks: tr})
		if err != nil {
			return err
		}
		a.video = in
		g.Go(func() error { return in.Run(ctx) })
		select {
		case <-in.Ready():
		case <-ctx.Done():
		}
	}
	if in := a.telem; in != nil {
		g.Go(func() error { return in.Run(ctx) })
		// Ready means subscribed (or listening, without a broker): on a
		// first start, messages published before the subscription exists
		// are not kept for us by the broker.
		select {
		case <-in.Subscribed():
		case <-ctx.Done():
		case <-time.After(a.cfg.Telemetry.ConnectTimeout):
			a.log.Warn("telemetry: not subscribed yet; running on, the broker session keeps messages once it is", "broker", a.cfg.Telemetry.Broker)
		}
	}
	a.startMAVLink(ctx, g)
	return nil
}

// newTelemetry builds the telemetry ingester and binds its listener (so
// that an address in use is a config error before any part started).
func (a *Agent) newTelemetry(d *deviceParts) error {
	st, tr := a.streams["telemetry"], a.trackers["telemetry"]
	if st == nil {
		return fmt.Errorf("%w: telemetry.enabled needs a streams.telemetry entry", ErrConfig)
	}
	tc := a.cfg.Telemetry.Config
	if tc.ClientID == "" {
		tc.ClientID = telemetry.ClientIDFor(a.id)
	}
	tc.Logger = a.log.With("part", "telemetry")
	in, err := telemetry.New(tc, telemetry.Sink{Stream: d.telemetrySink(st), Meta: a.store,
		Marks: d.telemetryMarks(tr)})
	if err != nil {
		// The telemetry error names its part ("telemetry: invalid config: ...").
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := in.Bind(); err != nil {
		var se *os.SyscallError
		if errors.As(err, &se) {
			return fmt.Errorf("%w: telemetry.listen: %s: %v (another server there?): choose another HOST:PORT", ErrConfig, tc.Listen, se)
		}
		return fmt.Errorf("%w: telemetry.listen: %w", ErrConfig, err)
	}
	a.telem = in
	return nil
}

func (a *Agent) startHTTP() (*http.Server, error) {
	if a.cfg.HTTP.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w", a.cfg.HTTP.Listen, err)
	}
	a.httpAddr = ln.Addr().String()
	return serveHTTP(ln, a.Handler()), nil
}
