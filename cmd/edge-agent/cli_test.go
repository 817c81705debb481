package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/edge-agent/edge-agent/agent"
)

// TestVersionFlag: --version prints what `version` prints, exit 0 (issue
// 40: it was "unknown command", exit 2).
func TestVersionFlag(t *testing.T) {
	code, want, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(want, "edge-agent dev (commit ") {
		t.Fatalf("version: exit %d, %q", code, want)
	}
	for _, arg := range []string{"--version", "-version"} {
		if code, out, errOut := run(t, arg); code != 0 || out != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0 and %q", arg, code, out, errOut, want)
		}
	}
}

// TestVersionNamesCommit: the version line names the commit, whether the
// tree was modified, its time and the Go release, from Go's build info as
// `go build` records it in a git checkout (the test binary itself has
// none: go test does not stamp VCS settings).
func TestVersionNamesCommit(t *testing.T) {
	// `go version -m` of a binary built in a checkout with changes.
	bi, err := debug.ParseBuildInfo("path\tgithub.com/edge-agent/edge-agent/cmd/edge-agent\n" +
		"mod\tgithub.com/edge-agent/edge-agent\t(devel)\t\n" +
		"build\tvcs=git\nbuild\tvcs.revision=6a196d6abcdef0123456789abcdef0123456789a\n" +
		"build\tvcs.time=2026-12-07T03:00:00Z\nbuild\tvcs.modified=true\n")
	if err != nil {
		t.Fatal(err)
	}
	bi.GoVersion = "go1.26.10" // the header line of `go version -m`, not in the parsed text
	got := agent.BuildOf("1.4.0", bi).String()
	want := "1.4.0 (commit 6a196d6abcdef0123456789abcdef0123456789a, modified, 2026-12-07T03:00:00Z; go1.26.10)"
	if got != want {
		t.Fatalf("version: %q\nwant:    %q", got, want)
	}
	bi.Settings = slices.DeleteFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "vcs.modified" })
	if got := agent.BuildOf("dev", bi).String(); !strings.HasPrefix(got, "dev (commit 6a196d6abcdef0123456789abcdef0123456789a, 2026-") {
		t.Fatalf("unmodified: %q", got)
	}
}

// TestHelpCommand: `help CMD`, `CMD --help` and `CMD -h` print the
// command's own help (its usage line, what it does, its flags) on stdout
// and exit 0, for every command and subcommand (issue 40: `help run`
// printed the top-level list; `run --help` exited 2 with help on stderr).
func TestHelpCommand(t *testing.T) {
	var cmds [][]string
	for name, c := range commands {
		cmds = append(cmds, []string{name})
		if name != "completion" {
			for _, sub := range c.subcommands {
				cmds = append(cmds, []string{name, sub})
			}
		}
	}
	if len(cmds) < 12 {
		t.Fatalf("only %d commands", len(cmds))
	}
	for _, cmd := range cmds {
		name := strings.Join(cmd, " ")
		want := ""
		for _, args := range [][]string{append([]string{"help"}, cmd...), append(slices.Clone(cmd), "--help"), append(slices.Clone(cmd), "-h")} {
			code, out, errOut := run(t, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: edge-agent "+name+" ") || !strings.Contains(out, commands[cmd[0]].summary) {
				t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
				continue
			}
			if want == "" {
				want = out
			} else if out != want {
				t.Errorf("%q prints another help than `help %s`:\n%s", args, name, out)
			}
		}
	}
	if _, out, _ := run(t, "help", "run"); !strings.Contains(out, "-config") || !strings.Contains(out, "-log-format") {
		t.Errorf("help run lists no flags:\n%s", out)
	}
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "completion bash|zsh|fish") {
		t.Errorf("help: exit %d:\n%s", code, out)
	}
	// A bad flag is still bad usage: exit 2, on stderr.
	if code, out, errOut := run(t, "run", "--no-such-flag"); code != 2 || out != "" || !strings.Contains(errOut, "flag provided but not defined") {
		t.Errorf("bad flag: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCompletion: the bash, zsh and fish scripts load in their shells
// and complete commands, subcommands, flags and --log-format's values.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	script := func(shell string) string {
		code, out, errOut := run(t, "completion", shell)
		if code != 0 || errOut != "" {
			t.Fatalf("completion %s: exit %d: %s", shell, code, errOut)
		}
		p := filepath.Join(dir, "edge-agent."+shell)
		if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	shellOut := func(shell string, args ...string) string {
		t.Helper()
		if _, err := exec.LookPath(shell); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs it): %v", shell, err)
		}
		out, err := exec.Command(shell, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", shell, args, err, out)
		}
		return string(out)
	}
	cases := []struct {
		line []string // the words typed, the last one being completed
		want string
	}{
		{[]string{"ex"}, "export"},
		{[]string{"export", "v"}, "video"},
		{[]string{"export", "video", "--dr"}, "--drone"},
		{[]string{"run", "--con"}, "--config"},
		{[]string{"--log-format", "j"}, "json"},
		{[]string{"--log-format", "json", "cu"}, "cut"},
		{[]string{"help", "sim"}, "simulate"},
		{[]string{"completion", "f"}, "fish"},
	}
	var lines []string
	for _, c := range cases {
		lines = append(lines, "edge-agent "+strings.Join(c.line, " "))
	}
	// One shell per script, one output line per case.
	check := func(shell string, out string) {
		got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for i, c := range cases {
			if i >= len(got) || strings.Join(strings.Fields(got[i]), " ") != c.want {
				t.Errorf("%s %q: got %q, want %q (all: %q)", shell, c.line, got[min(i, len(got)-1)], c.want, got)
			}
		}
	}
	check("bash", shellOut("bash", append([]string{"-c", `f=$1; shift; source "$f"; for l in "$@"; do read -ra COMP_WORDS <<<"$l"; ` +
		`COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _edge_agent; echo "${COMPREPLY[@]}"; done`, "bash", script("bash")}, lines...)...))
	check("zsh", shellOut("zsh", append([]string{"-c", `autoload -U compinit && compinit -u -D; f=$1; shift; source "$f"; for l in "$@"; do ` +
		`words=(${=l}); CURRENT=${#words}; m=(); for w in $(_edge_agent_words); do [[ $w == ${words[CURRENT]}* ]] && m+=($w); done; echo ${m[@]}; done`,
		"zsh", script("zsh")}, lines...)...))
	check("fish", shellOut("fish", append([]string{"-c", `source $argv[1]; for l in $argv[2..]; echo (complete -C"$l" | string replace -r '\t.*' ''); end`,
		script("fish")}, lines...)...))
}

// TestSourceBuildNamesCommit: `make build` links the checkout's commit,
// which the version line names when Go's build info records none — in a
// git worktree (its .git is a file, which Go's VCS stamping does not
// look into) or under GOFLAGS=-buildvcs=false (as CI containers set
// against git's ownership check). Both printed "dev (commit unknown; …)".
func TestSourceBuildNamesCommit(t *testing.T) {
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "build").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	if want := "-X main.commit=" + strings.TrimSpace(string(head)); !strings.Contains(string(out), want) {
		t.Errorf("make build links no commit (want %s):\n%s", want, out)
	}
	defer func(c string, m bool) { agent.LinkedCommit, agent.LinkedModified = c, m }(agent.LinkedCommit, agent.LinkedModified)
	agent.LinkedCommit, agent.LinkedModified = "6a196d6abcdef0123456789abcdef0123456789a", true
	// The test binary's build info has no vcs.revision (go test stamps none).
	if got := agent.ReadBuild().String(); !strings.HasPrefix(got, "dev (commit 6a196d6abcdef0123456789abcdef0123456789a, modified; go1.") {
		t.Errorf("version of a build with a linked commit: %q", got)
	}
}
