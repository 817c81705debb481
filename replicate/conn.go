package replicate

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnConfig configures the connection to the central store. Secrets in it
// are never logged (String redacts them).
type ConnConfig struct {
	// URLs are the servers (nats://host:port or tls://host:port), tried in
	// order with random start. Required.
	URLs []string
	// Name is the client name shown by the server. Default "edge-agent".
	Name string
	// CAFile verifies the server; CertFile/KeyFile are the client
	// certificate. Empty = plain TCP (or system roots for tls:// URLs).
	CAFile, CertFile, KeyFile string
	// CredsFile is a NATS credentials file (JWT + nkey seed).
	CredsFile string
	// NkeySeedFile is an nkey seed file (user nkey auth).
	NkeySeedFile string
	// User and Password authenticate by user/password.
	User, Password string
	// Token authenticates by token.
	Token string
	// MaxReconnectWait caps the jittered wait between reconnect attempts.
	// Default 250 ms: the NATS default (2 s) alone would miss the 1 s
	// recovery target after a link cut.
	MaxReconnectWait time.Duration
	// ConnectTimeout bounds one dial + handshake. Default 2 s.
	ConnectTimeout time.Duration
	// RequestTimeout is the JetStream API default timeout. Default 5 s.
	RequestTimeout time.Duration
	// PingInterval detects a silently dead link (two missed pongs).
	// Default 2 s.
	PingInterval time.Duration
	// IgnoreDiscoveredServers uses only URLs, never the servers that the
	// cluster advertises (for proxies and NAT). Default false.
	IgnoreDiscoveredServers bool
	// Dialer replaces the TCP dialer (tests; the agent's uplink meter,
	// Uplink.Dialer). Default nil.
	Dialer nats.CustomDialer
	// Outage, when set, follows the connection: since when it is down
	// and why (each failed attempt's error). It is the agent's one
	// record of the centre's link, for /readyz, /status and the page.
	// Default nil.
	Outage *Outage
}

// Validate checks the configuration.
func (c ConnConfig) Validate() error {
	if len(c.URLs) == 0 {
		return fmt.Errorf("%w: central URL is required (nats://host:port)", ErrConfig)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: client certificate needs both cert and key files", ErrConfig)
	}
	auth := 0
	for _, set := range []bool{c.CredsFile != "", c.NkeySeedFile != "", c.User != "", c.Token != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		return fmt.Errorf("%w: choose one of credentials file, nkey seed file, user/password, token", ErrConfig)
	}
	return nil
}

// String describes the config without secrets.
func (c ConnConfig) String() string {
	auth := "none"
	switch {
	case c.CredsFile != "":
		auth = "creds-file"
	case c.NkeySeedFile != "":
		auth = "nkey"
	case c.User != "":
		auth = "user-password"
	case c.Token != "":
		auth = "token"
	}
	return fmt.Sprintf("urls=%s tls=%t auth=%s", c.redactedURLs(), c.CAFile != "" || c.CertFile != "", auth)
}

// redactedURLs lists the URLs without passwords or tokens.
func (c ConnConfig) redactedURLs() string {
	out := make([]string, len(c.URLs))
	for i, raw := range c.URLs {
		out[i] = raw
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				out[i] = u.Redacted()
			} else {
				u.User = url.User("xxxxx") // a token
				out[i] = u.String()
			}
		}
	}
	return strings.Join(out, ",")
}

// Connect connects to the central store. It returns at once even when no
// server is reachable: the connection keeps reconnecting forever with short
// capped jittered waits, and the agent keeps capturing meanwhile.
func Connect(cfg ConnConfig, logger *slog.Logger) (*nats.Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	maxWait := cfg.MaxReconnectWait
	if maxWait <= 0 {
		maxWait = 250 * time.Millisecond
	}
	ct := cfg.ConnectTimeout
	if ct <= 0 {
		ct = 2 * time.Second
	}
	ping := cfg.PingInterval
	if ping <= 0 {
		ping = 2 * time.Second
	}
	name := cfg.Name
	if name == "" {
		name = "edge-agent"
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.Timeout(ct),
		nats.PingInterval(ping),
		nats.MaxPingsOutstanding(2),
		// No buffering while disconnected: a publish fails at once and the
		// transaction is retried from the committed cut.
		nats.ReconnectBufSize(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := min(time.Duration(attempts)*20*time.Millisecond, maxWait)
			return d/2 + rand.N(d/2+1)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if cfg.Outage != nil {
				cfg.Outage.lost(time.Now(), err)
			}
			if err != nil {
				logger.Warn("central disconnected", "err", err)
			}
		}),
		// Without a handler nats.go prints async errors (e.g. writes on a
		// dropped link) to stderr.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Debug("central async error", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if cfg.Outage != nil {
				cfg.Outage.up(time.Now())
			}
			logger.Info("central reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		// With RetryOnFailedConnect a first connect that fails is retried
		// here, silently unless logged: say which URL cannot be reached.
		nats.ConnectHandler(func(nc *nats.Conn) {
			if cfg.Outage != nil {
				cfg.Outage.up(time.Now())
			}
			logger.Info("central connected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if cfg.Outage != nil {
				cfg.Outage.lost(time.Now(), err)
			}
			// Only the agent captures: it says so itself (agent.go); a
			// reading command is just waiting.
			logger.Warn("central unreachable; retrying", "urls", cfg.redactedURLs(), "err", err)
		}),
	}
	if cfg.IgnoreDiscoveredServers {
		opts = append(opts, nats.IgnoreDiscoveredServers())
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	if cfg.CertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.CertFile, cfg.KeyFile))
	}
	switch {
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	case cfg.NkeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("%w: nkey seed file: %v", ErrConfig, err)
		}
		opts = append(opts, o)
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.Dialer != nil {
		opts = append(opts, nats.SetCustomDialer(cfg.Dialer))
	}
	if cfg.Outage != nil {
		cfg.Outage.start(time.Now())
	}
	nc, err := nats.Connect(strings.Join(cfg.URLs, ","), opts...)
	if nc != nil && nc.IsConnected() && cfg.Outage != nil {
		cfg.Outage.up(time.Now())
	}
	if err != nil {
		return nil, fmt.Errorf("replicate: connect to central (%s): %w", cfg, err)
	}
	return nc, nil
}
