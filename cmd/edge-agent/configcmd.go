package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

func init() {
	commands["config"] = command{
		summary:     "config check FILE: validate a configuration (with the EDGE_AGENT_ environment over it) and print the effective one, secrets redacted",
		run:         runConfig,
		subcommands: []string{"check"},
	}
}

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && asksHelp(args[:1]) {
		commandUsage(newFlagSet("config", stderr), "config")
		return usageError{flag.ErrHelp}
	}
	if len(args) == 0 || args[0] != "check" {
		return usagef("usage: edge-agent config check FILE")
	}
	fs := newFlagSet("config check", stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usagef("usage: edge-agent config check FILE")
	}
	cfg, err := fileAndEnvConfig(fs.Arg(0))
	if err != nil {
		return err
	}
	secrets.AddConfig(cfg)
	// What run refuses at start, not Validate alone: the credential and
	// TLS files, password variables and data_dir too.
	if err := cfg.Check(); err != nil {
		return usageError{err}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	// stdout passes through the redactor (runMain), which now knows the
	// configuration's URLs and the secrets its files hold.
	fmt.Fprintf(stdout, "# %s: valid; the effective configuration (defaults, file, environment):\n%s", fs.Arg(0), b)
	return nil
}
