package main

import (
	"cmp"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"

	"github.com/edge-agent/edge-agent/agent"
)

// globals are the flags given before the command, for every command.
type globals struct {
	// logFormat is --log-format, "" when not given: then `run` takes
	// log.format (file, EDGE_AGENT_LOG_FORMAT), the other commands
	// EDGE_AGENT_LOG_FORMAT, else text.
	logFormat string
}

// global holds the process's global flags, set by dispatch before the
// command runs (one command per process; tests run them one at a time).
var global globals

// parseGlobal takes the global flags off the front of args.
func parseGlobal(args []string) ([]string, error) {
	var g globals
	for len(args) > 0 {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if !strings.HasPrefix(args[0], "-") || name != "log-format" {
			break
		}
		if !hasValue {
			if len(args) < 2 {
				return nil, fmt.Errorf("--log-format needs a value: text or json")
			}
			value, args = args[1], args[1:]
		}
		args = args[1:]
		g.logFormat = value
	}
	if g.logFormat != "" && g.logFormat != "text" && g.logFormat != "json" {
		return nil, fmt.Errorf("--log-format %q: want text or json", g.logFormat)
	}
	global = g
	return args, nil
}

// commandLogger is the one logger of every command: the global format,
// warnings and errors (a command's output is its result; connection
// notices are not), secrets redacted, repeats rate-limited (agent.NewLogger).
// `run` builds its own from the configuration, which the global flag
// overrides.
func commandLogger(stderr io.Writer) *slog.Logger { return levelLogger(stderr, "warn") }

// levelLogger is commandLogger at another level (a service command's
// info lines: central unpack).
func levelLogger(stderr io.Writer, level string) *slog.Logger {
	format := cmp.Or(global.logFormat, os.Getenv(agent.EnvPrefix+"LOG_FORMAT"), "text")
	if format != "json" {
		format = "text"
	}
	return agent.NewLogger(agent.LogConfig{Level: level, Format: format}, stderr)
}

// useLogger makes l the default logger (what packages log through when
// given none, and the log package) until the returned func restores the
// previous one.
func useLogger(l *slog.Logger) (restore func()) {
	prev, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(l)
	return func() {
		slog.SetDefault(prev)
		log.SetOutput(out)
		log.SetFlags(flags)
	}
}
