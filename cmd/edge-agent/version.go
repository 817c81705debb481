package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set with -ldflags "-X main.version=..." by release builds.
var version = "dev"

func init() {
	commands["version"] = command{
		summary: "print the version",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			fs := newFlagSet("version", stderr)
			if err := parseFlags(fs, args); err != nil {
				return err
			}
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			fmt.Fprintf(stdout, "edge-agent %s (%s)\n", version, goVersion)
			return nil
		},
	}
}
