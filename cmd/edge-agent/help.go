package main

import (
	"flag"
	"fmt"
	"strings"
)

// commandUsage is the -h/--help text of a command's flags: its usage
// line, what it does, its subcommands and flags.
func commandUsage(fs *flag.FlagSet, name string) {
	w := fs.Output()
	fmt.Fprintf(w, "usage: %s [flags]\n", fs.Name())
	if c, ok := commands[strings.Fields(name)[0]]; ok {
		fmt.Fprintf(w, "\n%s\n", c.summary)
		if len(c.subcommands) > 0 && !strings.Contains(name, " ") {
			fmt.Fprintf(w, "\nsubcommands: %s (edge-agent help %s SUBCOMMAND)\n", strings.Join(c.subcommands, ", "), name)
		}
	}
	fmt.Fprintln(w, "\nflags:")
	fs.PrintDefaults()
}

// asksHelp tells whether a command's arguments ask for its help.
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// helpFlags returns the flags a command's help lists ("--config", ...),
// read from the help itself so that completion offers what parsing takes.
func helpFlags(help string) []string {
	var out []string
	for l := range strings.SplitSeq(help, "\n") {
		// flag.PrintDefaults: "  -name TYPE" then the usage indented by a tab.
		if rest, ok := strings.CutPrefix(l, "  -"); ok {
			name, _, _ := strings.Cut(rest, " ")
			if len(name) == 1 {
				out = append(out, "-"+name) // -o
			} else {
				out = append(out, "--"+name)
			}
		}
	}
	return out
}
