package agent

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Build describes the running binary: the release version and what Go's
// build info says of the source (the commit, whether the tree had
// uncommitted changes) and the toolchain.
type Build struct {
	// Version is the release version (make dist: -X main.version), "dev"
	// for a source build.
	Version string
	// Revision is the VCS commit the binary was built from (vcs.revision),
	// "" when the build recorded none (go test, -buildvcs=false).
	Revision string
	// Modified tells that the tree had uncommitted changes (vcs.modified).
	Modified bool
	// Time is the commit time (vcs.time), RFC 3339, or "".
	Time string
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// Version is the release version of the binary; the command sets it
// from its own (make dist links -X main.version) before anything reads it.
var Version = "dev"

// LinkedCommit and LinkedModified name the source of a build that Go's
// VCS stamping missed: make links them from git (-X main.commit,
// main.modified), for a git worktree, whose .git is a file Go does not
// look into, and for GOFLAGS=-buildvcs=false. The command sets them with
// Version; Go's own vcs.revision wins when there is one.
var (
	LinkedCommit   string
	LinkedModified bool
)

// ReadBuild returns the Build of this process.
func ReadBuild() Build {
	bi, _ := debug.ReadBuildInfo()
	b := BuildOf(Version, bi)
	if b.Revision == "" {
		b.Revision, b.Modified = LinkedCommit, LinkedModified
	}
	return b
}

// BuildOf reads a Build from Go's build info (nil: none recorded).
func BuildOf(version string, bi *debug.BuildInfo) Build {
	b := Build{Version: version, GoVersion: "unknown"}
	if bi == nil {
		return b
	}
	b.GoVersion = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "vcs.time":
			b.Time = s.Value
		}
	}
	return b
}

// String is the version line's text after "edge-agent ":
// "dev (commit 6a196d6…, modified, 2026-12-07T03:00:00Z; go1.26.10)".
func (b Build) String() string {
	var src []string
	if b.Revision != "" {
		src = append(src, "commit "+b.Revision)
		if b.Modified {
			src = append(src, "modified")
		}
		if b.Time != "" {
			src = append(src, b.Time)
		}
	} else {
		src = append(src, "commit unknown")
	}
	return fmt.Sprintf("%s (%s; %s)", b.Version, strings.Join(src, ", "), b.GoVersion)
}
