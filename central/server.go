package central

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures one embedded JetStream node.
type Config struct {
	// Listen is the client HOST:PORT. Default "127.0.0.1:4222"; port 0
	// picks a free port once (kept across Restart).
	Listen string
	// DataDir is where JetStream keeps its files. Required.
	DataDir string
	// ServerName names the node; it must be unique in a cluster and stable
	// across restarts. Default "edge-central-<client port>".
	ServerName string
	// ClusterName, ClusterListen and Routes make the node a cluster member:
	// ClusterListen is the route HOST:PORT, Routes the other members'
	// route URLs (nats://host:port). All three empty = standalone.
	ClusterName   string
	ClusterListen string
	Routes        []string
	// NoAdvertise stops the node from telling clients about other nodes'
	// client URLs, so a client uses only the URLs it was configured with.
	NoAdvertise bool
	// MaxPayload is the largest message in bytes. Default 0 = the server's
	// default (1 MiB).
	MaxPayload int32
	// MaxBatchTimeout bounds the time from the first to the commit message
	// of an atomic batch. Default 0 = the server's default (10 s).
	MaxBatchTimeout time.Duration
	// MaxBatchSize is the largest atomic batch in messages. Default 0 = the
	// server's default (1000).
	MaxBatchSize int
	// MaxBatchInflightPerStream and MaxBatchInflightTotal bound the atomic
	// batches open at once per stream and per server. Default 0 = the
	// server's defaults (50 and 1000).
	MaxBatchInflightPerStream, MaxBatchInflightTotal int
	// DuplicateWindow caps streams' duplicate windows. Default 0 = server default.
	DuplicateWindow time.Duration
	// ReadyTimeout bounds Start's wait for the client port and JetStream.
	// Default 20 s.
	ReadyTimeout time.Duration
	// Logger receives the server's notices and errors (debug and trace are
	// off). Default: discard — the one exception to the packages' default
	// of slog.Default(): nats-server's notices are many and routine.
	Logger *slog.Logger
}

// Validate checks the configuration and names the field to fix.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("%w: data dir is required (--data-dir)", ErrConfig)
	}
	if _, _, err := splitHostPort(c.listen()); err != nil {
		return fmt.Errorf("%w: listen %q: %v", ErrConfig, c.Listen, err)
	}
	clustered := c.ClusterName != "" || c.ClusterListen != "" || len(c.Routes) > 0
	if clustered {
		if c.ClusterName == "" || c.ClusterListen == "" {
			return fmt.Errorf("%w: a cluster member needs both cluster name and cluster listen (--cluster-name, --cluster-listen)", ErrConfig)
		}
		if _, _, err := splitHostPort(c.ClusterListen); err != nil {
			return fmt.Errorf("%w: cluster listen %q: %v", ErrConfig, c.ClusterListen, err)
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return fmt.Errorf("%w: route %q is not a URL like nats://host:port", ErrConfig, r)
			}
		}
	}
	return nil
}

func (c Config) listen() string {
	if c.Listen == "" {
		return "127.0.0.1:4222"
	}
	return c.Listen
}

func splitHostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, n, nil
}

// Server is one embedded JetStream node. Its methods are safe for
// concurrent use.
type Server struct {
	cfg Config

	mu sync.Mutex
	// ns is the running nats server, nil when stopped. Guarded by mu.
	ns *server.Server
	// port and clusterPort are the bound ports, fixed at the first start so
	// that a restart comes back on the same addresses. Guarded by mu.
	port, clusterPort int
	// closed is set by Close. Guarded by mu.
	closed bool
}

// New validates cfg and returns a stopped server.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	_, p, _ := splitHostPort(cfg.listen())
	s := &Server{cfg: cfg, port: p}
	if cfg.ClusterListen != "" {
		_, s.clusterPort, _ = splitHostPort(cfg.ClusterListen)
	}
	return s, nil
}

// options builds the nats-server options for the current ports.
// Lock should be held.
func (s *Server) options() (*server.Options, error) {
	host, _, _ := splitHostPort(s.cfg.listen())
	if s.cfg.ClusterName == "" {
		name, err := keptName(s.cfg.DataDir, s.cfg.ServerName, s.defaultName())
		if err != nil {
			return nil, err
		}
		s.cfg.ServerName = name
	} else if s.cfg.ServerName == "" {
		// Fixed at the first start so that a restart finds its files.
		s.cfg.ServerName = s.defaultName()
	}
	name := s.cfg.ServerName
	o := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       s.port,
		NoSigs:     true,
		JetStream:  true,
		StoreDir:   filepath.Join(s.cfg.DataDir, name),
		MaxPayload: s.cfg.MaxPayload,
	}
	if s.port == 0 {
		o.Port = server.RANDOM_PORT
	}
	o.JetStreamLimits.MaxBatchTimeout = s.cfg.MaxBatchTimeout
	o.JetStreamLimits.MaxBatchSize = s.cfg.MaxBatchSize
	o.JetStreamLimits.MaxBatchInflightPerStream = s.cfg.MaxBatchInflightPerStream
	o.JetStreamLimits.MaxBatchInflightTotal = s.cfg.MaxBatchInflightTotal
	o.JetStreamLimits.Duplicates = s.cfg.DuplicateWindow
	if s.cfg.ClusterName != "" {
		ch, _, _ := splitHostPort(s.cfg.ClusterListen)
		o.Cluster = server.ClusterOpts{Name: s.cfg.ClusterName, Host: ch, Port: s.clusterPort, NoAdvertise: s.cfg.NoAdvertise}
		if s.clusterPort == 0 {
			o.Cluster.Port = server.RANDOM_PORT
		}
		o.Routes = server.RoutesFromStr(strings.Join(s.cfg.Routes, ","))
		// Short route retries so that a restarted member rejoins fast.
		o.Cluster.ConnectRetries = -1
	}
	if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("central: data dir: %w", err)
	}
	return o, nil
}

// defaultName is the server name of a node started without one.
// Lock should be held.
func (s *Server) defaultName() string {
	if s.port == 0 {
		return "edge-central"
	}
	return "edge-central-" + strconv.Itoa(s.port)
}

// StoreDir is where the node keeps its JetStream files
// (<data dir>/<server name>). Valid after the first Start.
func (s *Server) StoreDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filepath.Join(s.cfg.DataDir, s.cfg.ServerName)
}

// Start starts the node and waits until clients can connect and, when
// standalone, JetStream is enabled. A cluster member returns once its
// client port is up; JetStream becomes usable when a quorum has formed
// (WaitJetStream waits for that). Starting a running server is a no-op.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.ns != nil {
		return nil
	}
	o, err := s.options()
	if err != nil {
		return err
	}
	// nats-server only logs a port it cannot bind and then waits out
	// ReadyTimeout; find out now, with a message that says what to fix.
	if o.Port > 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(o.Host, fmt.Sprint(o.Port)))
		if err != nil {
			return &ListenError{Addr: s.cfg.listen(), Err: err}
		}
		l.Close()
	}
	ns, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("central: %w", err)
	}
	ns.SetLoggerV2(slogLogger{s.cfg.Logger}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(s.cfg.ReadyTimeout) {
		ns.Shutdown()
		return fmt.Errorf("%w: client port %s not up after %s", ErrNotReady, s.cfg.listen(), s.cfg.ReadyTimeout)
	}
	if a, ok := ns.Addr().(*net.TCPAddr); ok {
		s.port = a.Port
	}
	if ca := ns.ClusterAddr(); ca != nil {
		s.clusterPort = ca.Port
	}
	s.ns = ns
	return nil
}

// WaitJetStream waits until JetStream answers requests on this node (for a
// cluster: a meta leader is elected), or ctx ends.
func (s *Server) WaitJetStream(ctx context.Context) error {
	for {
		s.mu.Lock()
		ns := s.ns
		s.mu.Unlock()
		if ns == nil {
			return ErrClosed
		}
		if ns.JetStreamEnabled() && (s.cfg.ClusterName == "" || ns.JetStreamIsCurrent()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: jetstream: %w", ErrNotReady, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Shutdown stops the node (a crash stand-in for tests: the files stay).
// It is a no-op when stopped.
func (s *Server) Shutdown() {
	s.mu.Lock()
	ns := s.ns
	s.ns = nil
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart stops the node and starts it again on the same ports and data.
func (s *Server) Restart() error {
	s.Shutdown()
	return s.Start()
}

// Run starts the node and blocks until ctx ends, then shuts it down.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	s.Shutdown()
	return nil
}

// Close shuts the node down for good. It is idempotent.
func (s *Server) Close() error {
	s.Shutdown()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// ClientURL is the node's client URL (nats://host:port). Valid after the
// first Start.
func (s *Server) ClientURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	host, _, _ := splitHostPort(s.cfg.listen())
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(s.port))
}

// InProcessConn returns a client connection to the running node that
// does not go through its client port: an in-memory pipe instead of TCP
// loopback, with a write buffer as a socket has (see bufferedConn), for a
// client inside the node's own process (`edge-agent central --unpack`). Server is a nats.InProcessConnProvider: pass it to
// nats.InProcessServer; a reconnect after Restart reaches the new node.
// It fails with ErrNotReady while the node is stopped.
func (s *Server) InProcessConn() (net.Conn, error) {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return nil, fmt.Errorf("%w: stopped", ErrNotReady)
	}
	c, err := ns.InProcessConn()
	if err != nil {
		return nil, err
	}
	return newBufferedConn(c), nil
}

// ClusterURL is the node's route URL (nats://host:port), "" when standalone.
func (s *Server) ClusterURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.ClusterName == "" {
		return ""
	}
	host, _, _ := splitHostPort(s.cfg.ClusterListen)
	if host == "" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(s.clusterPort))
}

// Name is the node's server name.
func (s *Server) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns != nil {
		return s.ns.Name()
	}
	return s.cfg.ServerName
}

// Running reports whether the node is started.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns != nil
}

// IsStreamLeader reports whether this node leads the JetStream stream
// (always true for a running standalone node that has it).
func (s *Server) IsStreamLeader(stream string) bool {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return false
	}
	if s.cfg.ClusterName == "" {
		return true
	}
	return ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream)
}

// slogLogger adapts slog to the nats-server logger.
type slogLogger struct{ l *slog.Logger }

func (l slogLogger) Noticef(format string, v ...any) { l.l.Info(fmt.Sprintf(format, v...)) }
func (l slogLogger) Warnf(format string, v ...any)   { l.l.Warn(fmt.Sprintf(format, v...)) }
func (l slogLogger) Fatalf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l slogLogger) Errorf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l slogLogger) Debugf(format string, v ...any)  { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l slogLogger) Tracef(format string, v ...any)  {}
