package main

import (
	"context"
	"fmt"
	"io"

	"github.com/edge-agent/edge-agent/agent"
)

// version is set with -ldflags "-X main.version=..." by release builds;
// commit and modified ("true") by make from git, for builds that Go's
// VCS stamping misses (agent.LinkedCommit).
var version, commit, modified = "dev", "", ""

func init() {
	agent.Version = version
	agent.LinkedCommit, agent.LinkedModified = commit, modified == "true"
	commands["version"] = command{
		summary: "print the version, the commit it was built from and the Go release",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			fs := newFlagSet("version", stderr)
			if err := parseFlags(fs, args); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "edge-agent %s\n", agent.ReadBuild())
			return nil
		},
	}
}
