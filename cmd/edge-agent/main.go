// Command edge-agent is the drone ground-station ingestion agent: it captures
// RTP video and MQTT telemetry into durable local streams and replicates them
// exactly once to a central NATS JetStream.
//
// Each subcommand lives in its own file and registers itself in init().
// Exit status: 0 success, 1 runtime failure, 2 bad usage or config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/edge-agent/edge-agent/agent"
)

// command is one subcommand.
type command struct {
	// summary is the one line shown by `edge-agent help`.
	summary string
	// subcommands are the words that may follow the command's name
	// (`export video`), for help and shell completion.
	subcommands []string
	// run parses args and does the work. It returns a usageError for bad
	// usage or config (exit 2) and any other error for runtime failures (exit 1).
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by init() functions of the subcommand files.
var commands = map[string]command{}

// usageError marks an error as bad usage or config: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// newFlagSet returns a FlagSet that reports parse errors as usage errors;
// its usage (-h, --help) names the command and what it does.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("edge-agent "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { commandUsage(fs, name) }
	return fs
}

// parseFlags parses args and turns parse errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return usageError{err}
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// secrets is the process's one redactor: runMain gives it the URLs of
// the command line (every password or token in them, whatever characters
// it holds), `run` the secrets of its configuration, and every byte a
// subcommand writes to stdout or stderr passes through it, as do the
// lines of the standard and default slog loggers.
var secrets = agent.NewRedactor()

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stderr := secrets.Writer(os.Stderr)
	log.SetOutput(stderr) // slog.Default writes through it too
	code := runMain(ctx, os.Args[1:], os.Stdout, stderr)
	stderr.Flush()
	stop()
	os.Exit(code)
}

// runMain dispatches to a subcommand and maps its error to an exit
// status. What the subcommand writes, and its error, leave redacted.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		secrets.AddURLs(a)
	}
	out, errOut := secrets.Writer(stdout), secrets.Writer(stderr)
	defer out.Flush()
	defer errOut.Flush()
	return dispatch(ctx, args, out, errOut)
}

// dispatch runs the subcommand of args, after the global flags.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	args, err := parseGlobal(args)
	if err != nil {
		fmt.Fprintf(stderr, "edge-agent: %v\n", err)
		return 2
	}
	defer useLogger(commandLogger(stderr))()
	switch {
	case len(args) == 0:
		printHelp(stderr)
		return 2
	case args[0] == "--version" || args[0] == "-version":
		args = []string{"version"}
	case len(args) > 1 && args[0] == "help":
		// help CMD [SUB] is CMD [SUB] --help.
		args = append(args[1:], "--help")
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		printHelp(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "edge-agent: unknown command %q; run 'edge-agent help' for the list\n", args[0])
		return 2
	}
	if asksHelp(args[1:]) {
		stderr = stdout // help asked for is output, not an error
	}
	err = cmd.run(ctx, args[1:], stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "edge-agent %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "edge-agent %s: %v\n", args[0], err)
		return 1
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: edge-agent [--log-format text|json] <command> [flags]\n"+
		"       edge-agent help <command> | --version | completion bash|zsh|fish\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
