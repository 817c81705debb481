package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

func init() {
	commands["completion"] = command{
		summary:     "print a shell completion script: bash, zsh or fish (e.g. edge-agent completion bash > /etc/bash_completion.d/edge-agent)",
		run:         runCompletion,
		subcommands: []string{"bash", "zsh", "fish"},
	}
}

func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && asksHelp(args[:1]) {
		commandUsage(newFlagSet("completion", stderr), "completion")
		return usageError{flag.ErrHelp}
	}
	if len(args) != 1 {
		return usagef("usage: edge-agent completion bash|zsh|fish")
	}
	words := completionWords(ctx)
	switch args[0] {
	case "bash", "zsh":
		writeShell(stdout, args[0], words)
	case "fish":
		writeFish(stdout, words)
	default:
		return usagef("%q: want bash, zsh or fish", args[0])
	}
	return nil
}

// completionWords maps each command (and "command subcommand") to the
// words that may follow it: its subcommands and flags. The flags are read
// from each command's own --help, so the scripts offer what parsing takes.
func completionWords(ctx context.Context) map[string][]string {
	words := map[string][]string{}
	help := func(args ...string) []string {
		var out bytes.Buffer
		commands[args[0]].run(ctx, append(args[1:], "--help"), &out, &out)
		return helpFlags(out.String())
	}
	for name, c := range commands {
		words[name] = append(slices.Clone(c.subcommands), help(name)...)
		for _, sub := range c.subcommands {
			if name != "completion" {
				words[name+" "+sub] = help(name, sub)
			}
		}
	}
	words[""] = append(slices.Sorted(maps.Keys(commands)), "help", "--version", "--log-format")
	return words
}

// writeShell writes the completion of bash or zsh: _edge_agent_words
// prints the words that may come at the cursor (the command line in
// bash's COMP_WORDS/COMP_CWORD, zsh's words/CURRENT), _edge_agent offers
// them.
func writeShell(w io.Writer, shell string, words map[string][]string) {
	// bash counts the words from 0, zsh from 1.
	arr, cur, first := "COMP_WORDS", "COMP_CWORD", 1
	if shell == "zsh" {
		arr, cur, first = "words", "CURRENT", 2
		fmt.Fprint(w, "#compdef edge-agent\n# edge-agent completion for zsh: install as _edge-agent in a directory of $fpath.\n")
	} else {
		fmt.Fprint(w, "# edge-agent completion for bash: source it, or install it as\n# /usr/share/bash-completion/completions/edge-agent.\n")
	}
	fmt.Fprintf(w, `_edge_agent_words() {
  local i cmd="" sub=""
  for ((i = %d; i < %s; i++)); do
    case ${%s[i]} in
    --log-format) ((i++)) ;;
    -*) ;;
    *) if [[ -z $cmd ]]; then cmd=${%s[i]}; elif [[ -z $sub ]]; then sub=${%s[i]}; fi ;;
    esac
  done
  if [[ ${%s[%s-1]} == --log-format ]]; then echo text json; return; fi
  [[ $cmd == help ]] && cmd=""
  case "$cmd $sub" in
`, first, cur, arr, arr, arr, arr, cur)
	keys := slices.Sorted(maps.Keys(words))
	for _, k := range keys {
		if strings.Contains(k, " ") {
			fmt.Fprintf(w, "  %q) echo %s ;;\n", k, strings.Join(words[k], " "))
		}
	}
	for _, k := range keys {
		if k != "" && !strings.Contains(k, " ") {
			fmt.Fprintf(w, "  %q*) echo %s ;;\n", k+" ", strings.Join(words[k], " "))
		}
	}
	fmt.Fprintf(w, "  *) echo %s ;;\n  esac\n}\n", strings.Join(words[""], " "))
	if shell == "zsh" {
		fmt.Fprint(w, "_edge_agent() { compadd -- $(_edge_agent_words) }\ncompdef _edge_agent edge-agent\n")
		return
	}
	fmt.Fprint(w, `_edge_agent() { COMPREPLY=($(compgen -W "$(_edge_agent_words)" -- "${COMP_WORDS[COMP_CWORD]}")); }
complete -o default -F _edge_agent edge-agent
`)
}

// writeFish writes fish completions: __edge_agent_words lists the words
// typed after edge-agent other than flags (and --log-format's value), so
// that the command and subcommand are found after global flags.
func writeFish(w io.Writer, words map[string][]string) {
	fmt.Fprint(w, `# edge-agent completion for fish: install as ~/.config/fish/completions/edge-agent.fish
function __edge_agent_words
    set -l skip 0
    for a in (commandline -opc)[2..]
        if test $skip = 1
            set skip 0
            continue
        end
        switch $a
            case --log-format
                set skip 1
            case '-*'
            case '*'
                echo $a
        end
    end
end
function __edge_agent_at
    set -l w (__edge_agent_words)
    test "$w" = "$argv"
end
complete -c edge-agent -f
complete -c edge-agent -l log-format -x -a 'text json'
complete -c edge-agent -l version -d 'print the version'
`)
	cmds := slices.Sorted(maps.Keys(commands))
	fmt.Fprintf(w, "complete -c edge-agent -n '__edge_agent_at' -a %q\n", strings.Join(append(cmds, "help"), " "))
	for _, name := range cmds {
		c := commands[name]
		fmt.Fprintf(w, "complete -c edge-agent -n '__edge_agent_at help' -a %s -d %s\n", name, fishQuote(c.summary))
		at := "__edge_agent_at " + name
		if len(c.subcommands) > 0 {
			fmt.Fprintf(w, "complete -c edge-agent -n %s -a %q\n", fishQuote(at), strings.Join(c.subcommands, " "))
		}
		writeFishFlags(w, at, words[name])
		for _, sub := range c.subcommands {
			writeFishFlags(w, at+" "+sub, words[name+" "+sub])
		}
	}
}

func writeFishFlags(w io.Writer, cond string, words []string) {
	for _, f := range words {
		if name, ok := strings.CutPrefix(f, "--"); ok {
			fmt.Fprintf(w, "complete -c edge-agent -n %s -l %s\n", fishQuote(cond), name)
		} else if name, ok := strings.CutPrefix(f, "-"); ok {
			fmt.Fprintf(w, "complete -c edge-agent -n %s -s %s -r\n", fishQuote(cond), name)
		}
	}
}

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
