package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	agentpkg "github.com/edge-agent/edge-agent/agent"
	"github.com/edge-agent/edge-agent/replicate"
)

// centralConn is the connection flag set every central tool (read,
// export, cut, central unpack) takes. It resolves, as the nats CLI does,
// a flag before its environment variable (NATS_URL, NATS_USER,
// NATS_PASSWORD, NATS_CREDS, NATS_NKEY, NATS_CA, NATS_CERT, NATS_KEY)
// before the nats CLI context (--context, $NATS_CONTEXT, else the one
// selected in ~/.config/nats/context.txt), into the agent's own
// replicate.ConnConfig: how the project connects has one owner.
type centralConn struct {
	// fs tells which flags were given.
	fs *flag.FlagSet
	// flags are the values of the flags.
	flags connLayer
	// context is the nats CLI context name (--context).
	context string
}

// connLayer is one source of connection settings: the flags, the
// environment or a context. Fields hold a URL list or a file path, except
// user, password and token.
type connLayer struct {
	// from names the source in errors.
	from                                    string
	url, user, password, token, creds, nkey string
	ca, cert, key                           string
	// tlsFirst is a context's tls_first (refused).
	tlsFirst bool
	// The …Set fields tell which settings the source gives.
	urlSet, credsSet, nkeySet, userSet, tokenSet bool
	caSet, certSet, keySet, passwordSet          bool
}

// defaultCentralURL is where the central tools look without any setting.
const defaultCentralURL = "nats://127.0.0.1:4222"

// addCentralFlags adds the connection flags to fs. Their names are the
// nats CLI's (--creds, --nkey, --user, --password, --tlsca, --tlscert,
// --tlskey, --context); --central is the URL list, as everywhere in
// edge-agent.
func addCentralFlags(fs *flag.FlagSet) *centralConn {
	c := &centralConn{fs: fs}
	fs.StringVar(&c.flags.url, "central", "", "central `URLS` (comma-separated; default $NATS_URL, the context's url, else "+defaultCentralURL+")")
	fs.StringVar(&c.context, "context", "", "nats CLI context `NAME` (~/.config/nats/context/NAME.json; default $NATS_CONTEXT, else the selected one)")
	fs.StringVar(&c.flags.creds, "creds", "", "NATS credentials `FILE` (user JWT and nkey seed; default $NATS_CREDS)")
	fs.StringVar(&c.flags.nkey, "nkey", "", "NKey seed `FILE` (default $NATS_NKEY)")
	fs.StringVar(&c.flags.user, "user", "", "user `NAME`, or a token without --password (default $NATS_USER)")
	fs.StringVar(&c.flags.password, "password", "", "`PASSWORD` of --user (default $NATS_PASSWORD)")
	fs.StringVar(&c.flags.ca, "tlsca", "", "CA `FILE` that verifies the centre (default $NATS_CA)")
	fs.StringVar(&c.flags.cert, "tlscert", "", "client certificate `FILE` (default $NATS_CERT)")
	fs.StringVar(&c.flags.key, "tlskey", "", "client key `FILE` (default $NATS_KEY)")
	return c
}

// config resolves the connection settings into the agent's ConnConfig,
// with name as the client name. Errors are usage errors naming where the
// bad setting came from.
func (c *centralConn) config(name string) (replicate.ConnConfig, error) {
	flags := c.flags
	flags.from = "flag"
	c.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "central":
			flags.urlSet = true
		case "creds":
			flags.credsSet = true
		case "nkey":
			flags.nkeySet = true
		case "user":
			flags.userSet = true
		case "password":
			flags.passwordSet = true
		case "tlsca":
			flags.caSet = true
		case "tlscert":
			flags.certSet = true
		case "tlskey":
			flags.keySet = true
		}
	})
	env := envLayer()
	ctxLayer, err := c.contextLayer()
	if err != nil {
		return replicate.ConnConfig{}, err
	}
	layers := []connLayer{flags, env, ctxLayer}
	cfg := replicate.ConnConfig{Name: name}
	url := defaultCentralURL
	urlFrom := ""
	for i := len(layers) - 1; i >= 0; i-- { // the first layer that sets a field wins
		l := layers[i]
		if l.urlSet {
			url, urlFrom = l.url, l.from
		}
		if l.caSet {
			cfg.CAFile = l.ca
		}
		if l.certSet {
			cfg.CertFile = l.cert
		}
		if l.keySet {
			cfg.KeyFile = l.key
		}
	}
	if url == "" {
		return cfg, usagef("--central: empty URL (from %s)", urlFrom)
	}
	cfg.URLs = strings.Split(url, ",")
	// Authentication comes whole from one layer: a --creds given on the
	// command line replaces a context's user and password, not joins them.
	for _, l := range layers {
		if !l.credsSet && !l.nkeySet && !l.userSet && !l.tokenSet && !l.passwordSet {
			continue
		}
		if l.tlsFirst {
			return cfg, usagef("%s: tls_first is not supported (the centre sends INFO first)", l.from)
		}
		if l.passwordSet && !l.userSet {
			return cfg, usagef("%s: a password needs a user", l.from)
		}
		cfg.CredsFile, cfg.NkeySeedFile, cfg.Token = l.creds, l.nkey, l.token
		switch {
		case l.userSet && l.passwordSet:
			cfg.User, cfg.Password = l.user, l.password
		case l.userSet:
			cfg.Token = l.user // the nats CLI's "Username or Token"
		}
		for _, f := range []struct{ what, path string }{{"creds", l.creds}, {"nkey", l.nkey}} {
			if strings.HasPrefix(f.path, "file://") {
				f.path = strings.TrimPrefix(f.path, "file://")
			} else if strings.Contains(f.path, "://") || strings.HasPrefix(f.path, "data:") {
				return cfg, usagef("%s: %s %q: only a file path (or file://) is supported", l.from, f.what, f.path)
			}
			if f.what == "creds" {
				cfg.CredsFile = f.path
			} else {
				cfg.NkeySeedFile = f.path
			}
		}
		break
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("%v", err)
	}
	for _, f := range []struct{ what, path string }{{"--creds", cfg.CredsFile}, {"--nkey", cfg.NkeySeedFile},
		{"--tlsca", cfg.CAFile}, {"--tlscert", cfg.CertFile}, {"--tlskey", cfg.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return cfg, usagef("%s: %v", f.what, err)
		}
	}
	return cfg, nil
}

// envLayer reads the nats CLI's environment variables.
func envLayer() connLayer {
	l := connLayer{from: "environment"}
	for _, v := range []struct {
		name string
		val  *string
		set  *bool
	}{{"NATS_URL", &l.url, &l.urlSet}, {"NATS_USER", &l.user, &l.userSet}, {"NATS_PASSWORD", &l.password, &l.passwordSet},
		{"NATS_CREDS", &l.creds, &l.credsSet}, {"NATS_NKEY", &l.nkey, &l.nkeySet}, {"NATS_CA", &l.ca, &l.caSet},
		{"NATS_CERT", &l.cert, &l.certSet}, {"NATS_KEY", &l.key, &l.keySet}} {
		*v.val = os.Getenv(v.name)
		*v.set = *v.val != ""
	}
	return l
}

// natsContext is a nats CLI context document: the fields of ADR-21 that a
// connection uses (others, such as description or jetstream_domain, are
// ignored).
type natsContext struct {
	URL      string `json:"url"`
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	Nkey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	TLSFirst bool   `json:"tls_first"`
}

// natsConfigDir is $XDG_CONFIG_HOME/nats (default ~/.config/nats).
func natsConfigDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// contextLayer loads the nats CLI context named by --context, else
// $NATS_CONTEXT, else the selected one (context.txt); none is an empty
// layer.
func (c *centralConn) contextLayer() (connLayer, error) {
	dir, derr := natsConfigDir()
	name, from := c.context, "--context"
	if name == "" {
		name, from = os.Getenv("NATS_CONTEXT"), "$NATS_CONTEXT"
	}
	if name == "" && derr == nil {
		if b, err := os.ReadFile(filepath.Join(dir, "context.txt")); err == nil {
			name, from = strings.TrimSpace(string(b)), "the selected nats context ("+filepath.Join(dir, "context.txt")+")"
		}
	}
	if name == "" {
		return connLayer{}, nil
	}
	if derr != nil {
		return connLayer{}, usagef("%s %q: %v", from, name, derr)
	}
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return connLayer{}, usagef("%s %q: not a context name", from, name)
	}
	path := filepath.Join(dir, "context", name+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		return connLayer{}, usagef("%s %q: %v", from, name, err)
	}
	var nc natsContext
	if err := json.Unmarshal(b, &nc); err != nil {
		return connLayer{}, usagef("%s %q: %s: %v", from, name, path, err)
	}
	return connLayer{from: "nats context " + name + " (" + path + ")",
		url: nc.URL, urlSet: nc.URL != "", token: nc.Token, tokenSet: nc.Token != "",
		user: nc.User, userSet: nc.User != "", password: nc.Password, passwordSet: nc.Password != "",
		creds: nc.Creds, credsSet: nc.Creds != "", nkey: nc.Nkey, nkeySet: nc.Nkey != "",
		ca: nc.CA, caSet: nc.CA != "", cert: nc.Cert, certSet: nc.Cert != "", key: nc.Key, keySet: nc.Key != "",
		tlsFirst: nc.TLSFirst}, nil
}

// connect connects a command to the centre and waits until it is there.
func (c *centralConn) connect(name string) (*nats.Conn, error) {
	cfg, err := c.config(name)
	if err != nil {
		return nil, err
	}
	nc, err := replicate.Connect(cfg, nil)
	if err != nil {
		return nil, err
	}
	// The connection retries in the background: a request on one that never
	// came up fails as "outbound buffer limit exceeded", which says nothing
	// of the centre. Wait for it, and say why it is not there.
	for deadline := time.Now().Add(centralConnectWait); !nc.IsConnected(); time.Sleep(20 * time.Millisecond) {
		// A refused login will not pass by waiting.
		if why := nc.LastError(); time.Now().After(deadline) || errors.Is(why, nats.ErrAuthorization) || errors.Is(why, nats.ErrAuthExpired) {
			nc.Close()
			urls := strings.Join(cfg.URLs, ",")
			if why != nil {
				return nil, fmt.Errorf("%w: %s: %v", errCentralUnreachable, agentpkg.RedactURLs(urls), why)
			}
			return nil, fmt.Errorf("%w: %s: %s", errCentralUnreachable, agentpkg.RedactURLs(urls), dialReason(urls))
		}
	}
	return nc, nil
}

// errCentralUnreachable: no server of --central answered.
var errCentralUnreachable = errors.New("central unreachable")

// centralConnectWait is how long a command waits for the centre.
const centralConnectWait = 5 * time.Second
