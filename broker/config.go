package broker

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// Options configure Start. The zero value is usable.
type Options struct {
	// Dir holds the configuration, the log and the persistence file.
	// Default: a new temporary directory, removed by Stop.
	Dir string
	// Binary is the mosquitto executable. Default: "mosquitto" from PATH,
	// else /usr/sbin/mosquitto, else /usr/local/sbin/mosquitto.
	Binary string
	// Port to listen on at 127.0.0.1. Default 0: a free port is chosen.
	Port int
	// MaxInflight is max_inflight_messages: unacknowledged QoS 1 messages in
	// flight to one client. Default 1000 (mosquitto's own default is 20, which
	// caps an ack-after-fsync subscriber at 20 messages per fsync).
	MaxInflight int
	// MaxQueued is max_queued_messages. Default 0 = unlimited (mosquitto's
	// default of 1000 silently drops QoS 1 messages for an offline client).
	MaxQueued int
	// AutosaveInterval is autosave_interval in seconds. Default 1.
	AutosaveInterval int
	// Embedded forces the embedded broker even if mosquitto is installed.
	Embedded bool
	// NoFallback makes Start fail with ErrNoBinary instead of falling back
	// to the embedded broker.
	NoFallback bool
	// NoAnonymous writes allow_anonymous false (with a password_file in
	// ExtraConfig) instead of allowing anonymous clients.
	NoAnonymous bool
	// ExtraConfig is appended to the configuration after the listener line,
	// so listener options (cafile, certfile, keyfile, require_certificate)
	// apply to the broker's listener. Ignored by the embedded broker.
	ExtraConfig string
	// Logger receives lifecycle messages: the fallback to the embedded
	// broker (Warn), start and restart (Debug). Default slog.Default().
	Logger *slog.Logger
}

// DefaultOptions returns the defaults noted on each field of Options:
// the one place their numbers are written (the others' defaults are their
// zero values; Logger nil is slog.Default()).
func DefaultOptions() Options {
	return Options{MaxInflight: 1000, AutosaveInterval: 1}
}

// withDefaults fills the unset fields of o from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MaxInflight == 0 {
		o.MaxInflight = d.MaxInflight
	}
	if o.AutosaveInterval == 0 {
		o.AutosaveInterval = d.AutosaveInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// mosquittoConfig renders the configuration file for a broker on port whose
// files live in dir.
func mosquittoConfig(o Options, dir string, port int) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# written by github.com/edge-agent/edge-agent/broker")
	line("listener %d 127.0.0.1", port)
	line("allow_anonymous %t", !o.NoAnonymous)
	if os.Geteuid() == 0 {
		// Run as root, mosquitto drops to user "mosquitto", which then cannot
		// write the persistence file into our directory.
		line("user root")
	}
	line("persistence true")
	line("persistence_location %s/", filepath.Join(dir, "data"))
	line("persistence_file mosquitto.db")
	line("autosave_interval %d", o.AutosaveInterval)
	line("max_queued_messages %d", o.MaxQueued)
	line("max_queued_bytes 0")
	line("max_inflight_messages %d", o.MaxInflight)
	line("max_keepalive 65535")
	line("log_dest file %s", filepath.Join(dir, "mosquitto.log"))
	line("log_type error")
	line("log_type warning")
	line("log_type notice")
	line("log_type information")
	line("connection_messages true")
	if o.ExtraConfig != "" {
		line("%s", o.ExtraConfig)
	}
	return b.String()
}
