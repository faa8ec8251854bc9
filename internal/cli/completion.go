package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/replay"
)

const completionUsage = `Usage: sluice completion bash|zsh|fish

Prints a script that makes the shell complete sluice's commands,
subcommands, flags and flag values. The script asks sluice itself for the
candidates, so it stays right when sluice is upgraded.

  bash  source <(sluice completion bash)          in ~/.bashrc, or save it as
        /usr/share/bash-completion/completions/sluice
  zsh   sluice completion zsh > "${fpath[1]}/_sluice"   then restart zsh
        (or: source <(sluice completion zsh), after compinit)
  fish  sluice completion fish > ~/.config/fish/completions/sluice.fish
`

// The command table that completion offers: every command, subcommand and
// flag of the sluice command line. Flags come from the code that defines
// them for parsing (serveFlags, and adminArgs.flagSet for each admin
// subcommand), and the admin subcommands from adminGroups, so completion
// cannot offer what the commands do not take; a test holds the command
// names to the usage.

// argKind is what a command's positional arguments are.
type argKind int

const (
	argNone    argKind = iota
	argFile            // the first is a file name
	argFiles           // every one is a file name
	argShell           // the first is a shell that completion supports
	argCommand         // the first is a command name, the second an admin group's subcommand
)

// cliCommand is one command of the table.
type cliCommand struct {
	name, summary string
	// flags returns the flags of the command, or of its subcommand sub;
	// nil for a command without flags.
	flags func(sub string) *flag.FlagSet
	// values lists the values of flags that take one of a fixed set.
	values map[string][]string
	// subs are the subcommands, for the admin commands.
	subs []string
	arg  argKind
}

// subSummaries describe the admin subcommands, for the shells that show
// descriptions.
var subSummaries = map[string]string{
	"client list":          "the overrides in force",
	"client show":          "one client's override",
	"client set-tier":      "put a client in a tier",
	"client set-limit":     "give a client its own limit for a rule",
	"client set-anchor":    "start a client's calendar quotas at its billing anchor",
	"client remove":        "remove a client's override",
	"key show":             "a key's state under each of its limits, uncharged",
	"key reset":            "forget a key: its full quota is back",
	"descriptor show":      "a descriptor's counter, uncharged",
	"descriptor reset":     "forget a descriptor's counter",
	"descriptor set-limit": "give a descriptor its own limit",
	"descriptor list":      "the descriptor overrides in force",
	"descriptor remove":    "remove a descriptor's override",
}

func serveFlagSet(string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	serveFlags(fs)
	return fs
}

// adminCommandSpec is the table's entry for an admin group.
func adminCommandSpec(group, summary string) cliCommand {
	return cliCommand{name: group, summary: summary, subs: adminGroups[group].subs,
		flags: func(sub string) *flag.FlagSet {
			var a adminArgs
			return a.flagSet(group, sub)
		}}
}

// commandTable returns the commands in the order the usage lists them.
func commandTable() []cliCommand {
	return []cliCommand{
		{name: "serve", summary: "run whatever the config file enables", flags: serveFlagSet,
			values: map[string][]string{
				"log-format": {"text", "json"},
				"log-level":  {"debug", "info", "warn", "error"},
			}},
		{name: "check-config", summary: "validate a config file", arg: argFile},
		{name: "replay", summary: "decide access logs with a config file's rules", flags: replayFlagSet, arg: argFiles,
			values: map[string][]string{"format": replay.FormatNames()}},
		adminCommandSpec("client", "per-client overrides, through the admin API"),
		adminCommandSpec("key", "look at or reset a key, through the admin API"),
		adminCommandSpec("descriptor", "a descriptor of the rate-limit service, through the admin API"),
		{name: "top", summary: "who is limited, live, through the admin API", flags: topFlagSet,
			values: map[string][]string{"by": {"limited", "requests"}, "window": {"60", "3600"}}},
		{name: "version", summary: "print the version"},
		{name: "completion", summary: "print a shell's completion script", arg: argShell},
		{name: "help", summary: "print the usage, or a command's", arg: argCommand},
	}
}

var shells = []string{"bash", "zsh", "fish"}

// completeVerb is the hidden argument of `sluice completion` by which the
// scripts ask for candidates.
const completeVerb = "__complete"

func completionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == completeVerb {
		cands, files, prefix := complete(args[1:])
		for _, c := range cands {
			fmt.Fprintf(stdout, "%s\t%s\n", c.word, c.desc)
		}
		if files {
			fmt.Fprintf(stdout, ":files\t%s\n", prefix)
		}
		return 0
	}
	c := newCommand("sluice completion", completionUsage, stderr)
	if code, done := c.parse(args, stdout); done {
		return code
	}
	if c.NArg() != 1 {
		return c.fail("want one SHELL: bash, zsh or fish")
	}
	switch c.Arg(0) {
	case "bash":
		io.WriteString(stdout, bashCompletion)
	case "zsh":
		io.WriteString(stdout, zshCompletion)
	case "fish":
		io.WriteString(stdout, fishCompletion)
	default:
		return c.fail("unknown shell %q: want bash, zsh or fish", c.Arg(0))
	}
	return 0
}

// candidate is a word the shell may complete, with a description for the
// shells that show one.
type candidate struct{ word, desc string }

// flagInfo is a flag as completion sees it.
type flagInfo struct {
	desc   string
	value  bool     // it takes a value (it is not a boolean flag)
	file   bool     // its value is a file name
	values []string // its value is one of these
}

// flagsOf returns the flags of cmd (of its subcommand sub), by name; an
// admin command has none before its subcommand.
func flagsOf(cmd *cliCommand, sub string) map[string]flagInfo {
	out := map[string]flagInfo{}
	if cmd == nil || cmd.flags == nil || (len(cmd.subs) > 0 && sub == "") {
		return out
	}
	cmd.flags(sub).VisitAll(func(f *flag.Flag) {
		placeholder, usage := flag.UnquoteUsage(f)
		b, isBool := f.Value.(interface{ IsBoolFlag() bool })
		out[f.Name] = flagInfo{
			desc:   usage,
			value:  !isBool || !b.IsBoolFlag(),
			file:   placeholder == "FILE",
			values: cmd.values[f.Name],
		}
	})
	return out
}

func findCommand(table []cliCommand, name string) *cliCommand {
	for i := range table {
		if table[i].name == name {
			return &table[i]
		}
	}
	return nil
}

// complete returns the candidates for the last of words, the words typed
// after "sluice" (the last one being the word under the cursor, "" for a
// new word), and whether the shell should add the names of files that
// start with that word's value; prefix is the part of the word before its
// value (--config= in --config=exa), which candidates carry too.
//
// bash splits --flag=value at the "=", so its words may hold "=" alone:
// the word after one is the value of the flag before it.
func complete(words []string) (cands []candidate, files bool, prefix string) {
	if len(words) == 0 {
		words = []string{""}
	}
	cur := words[len(words)-1]
	table := commandTable()
	var (
		cmd      *cliCommand
		sub      string   // the admin command's subcommand
		args     []string // positional arguments after the command (and subcommand)
		valueOf  string   // the flag whose value the next word is
		lastFlag string   // the flag just before, for bash's "="
		dashdash bool     // "--" ended the flags
	)
	for _, w := range words[:len(words)-1] {
		if w == "=" && lastFlag != "" {
			valueOf, lastFlag = lastFlag, ""
			continue
		}
		lastFlag = ""
		if valueOf != "" {
			valueOf = ""
			continue
		}
		if !dashdash && w == "--" {
			dashdash = true
			continue
		}
		if !dashdash && len(w) > 1 && w[0] == '-' {
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			lastFlag = name
			if f, ok := flagsOf(cmd, sub)[name]; ok && f.value && !hasValue {
				valueOf = name
			}
			continue
		}
		switch {
		case cmd == nil:
			if cmd = findCommand(table, w); cmd == nil {
				return nil, false, "" // not a command: nothing to offer
			}
		case len(cmd.subs) > 0 && sub == "":
			if !slices.Contains(cmd.subs, w) {
				return nil, false, ""
			}
			sub = w
		default:
			args = append(args, w)
		}
	}

	// The value of a flag.
	flagValue := func(name, value, prefix string) ([]candidate, bool, string) {
		f, ok := flagsOf(cmd, sub)[name]
		if !ok || !f.value {
			return nil, false, ""
		}
		var out []candidate
		for _, v := range f.values {
			if strings.HasPrefix(v, value) {
				out = append(out, candidate{prefix + v, f.desc})
			}
		}
		return out, f.file, prefix
	}
	if valueOf != "" {
		return flagValue(valueOf, cur, "")
	}
	var out []candidate
	add := func(word, desc string) {
		if strings.HasPrefix(word, cur) {
			out = append(out, candidate{word, desc})
		}
	}
	if !dashdash && strings.HasPrefix(cur, "-") {
		if name, value, ok := strings.Cut(cur, "="); ok {
			return flagValue(strings.TrimLeft(name, "-"), value, name+"=")
		}
		if cmd == nil {
			add("--version", "print the version")
		}
		fs := flagsOf(cmd, sub)
		names := make([]string, 0, len(fs))
		for name := range fs {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			add("--"+name, fs[name].desc)
		}
		if cmd == nil || cmd.name != "help" {
			add("--help", "print the usage")
		}
		return out, false, ""
	}

	// A positional argument.
	subsOf := func(c *cliCommand) {
		for _, s := range c.subs {
			add(s, subSummaries[c.name+" "+s])
		}
	}
	switch {
	case cmd == nil:
		for _, c := range table {
			add(c.name, c.summary)
		}
	case len(cmd.subs) > 0 && sub == "":
		subsOf(cmd)
	case cmd.arg == argFile && len(args) == 0, cmd.arg == argFiles:
		return nil, true, ""
	case cmd.arg == argShell && len(args) == 0:
		for _, s := range shells {
			add(s, "the "+s+" shell")
		}
	case cmd.arg == argCommand && len(args) == 0:
		for _, c := range table {
			if c.name != "help" {
				add(c.name, c.summary)
			}
		}
	case cmd.arg == argCommand && len(args) == 1:
		// sluice help client set-tier
		if c := findCommand(table, args[0]); c != nil {
			subsOf(c)
		}
	}
	return out, false, ""
}

// The scripts are thin: each hands the words typed to `sluice completion
// __complete` and turns its answer (a line "WORD<TAB>DESCRIPTION" per
// candidate, then ":files<TAB>PREFIX" when file names fit) into the
// shell's completions. They run the sluice that is being completed (the
// first word of the command line), so ./bin/sluice completes as itself.

const bashCompletion = `# bash completion for sluice, printed by "sluice completion bash".
# Load it with: source <(sluice completion bash)
# or save it as /usr/share/bash-completion/completions/sluice.
# The candidates come from sluice itself: "sluice completion __complete WORD...".

_sluice() {
    local cur=${COMP_WORDS[COMP_CWORD]}
    local -a words=("${COMP_WORDS[@]:1:COMP_CWORD}")
    # bash splits --flag=value at the "=": right after it, the value is empty.
    if [[ $cur == "=" ]]; then
        words+=("")
        cur=
    fi
    local prog=${COMP_WORDS[0]}
    [[ $prog == "~/"* ]] && prog=$HOME/${prog#"~/"}
    local out line files=
    out=$("$prog" completion __complete "${words[@]}" 2>/dev/null) || return 0
    COMPREPLY=()
    while IFS= read -r line; do
        case $line in
        :files*) files=1 ;;
        "") ;;
        *) COMPREPLY+=("${line%%$'\t'*}") ;;
        esac
    done <<<"$out"
    if [[ -n $files ]]; then
        compopt -o filenames 2>/dev/null
        local IFS=$'\n'
        COMPREPLY+=($(compgen -f -- "$cur"))
    fi
    return 0
}
complete -F _sluice sluice
`

const zshCompletion = `#compdef sluice
# zsh completion for sluice, printed by "sluice completion zsh".
# Save it as _sluice in a directory of $fpath and restart zsh,
# or load it with: source <(sluice completion zsh)  (after compinit).
# The candidates come from sluice itself: "sluice completion __complete WORD...".

_sluice() {
    local prog=${words[1]} out line word desc files= prefix=
    local -a cands
    prog=${prog/#\~/$HOME}
    out=$("$prog" completion __complete "${(@)words[2,CURRENT]}" 2>/dev/null) || return 1
    for line in "${(@f)out}"; do
        case $line in
        (:files*) files=1; prefix=${line#:files$'\t'} ;;
        ('') ;;
        (*)
            word=${line%%$'\t'*}
            desc=${line#*$'\t'}
            cands+=("${word//:/\\:}:$desc") ;;
        esac
    done
    local ret=1
    (( $#cands )) && _describe -t sluice 'sluice' cands && ret=0
    if [[ -n $files ]]; then
        [[ -n $prefix ]] && compset -P '*='
        _files && ret=0
    fi
    return ret
}

if [[ $funcstack[1] == _sluice ]]; then
    _sluice "$@"
else
    compdef _sluice sluice
fi
`

const fishCompletion = `# fish completion for sluice, printed by "sluice completion fish".
# Save it as ~/.config/fish/completions/sluice.fish,
# or load it with: sluice completion fish | source
# The candidates come from sluice itself: "sluice completion __complete WORD...".

function __sluice_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l prog (string replace -r '^~' $HOME -- $words[1])
    set -e words[1]
    set -l out ($prog completion __complete $words $cur 2>/dev/null)
    or return
    for line in $out
        switch $line
            case ':files*'
                set -l prefix (string replace -r '^:files\t?' '' -- $line)
                set -l value (string sub -s (math (string length -- "$prefix") + 1) -- $cur)
                for path in (__fish_complete_path $value)
                    printf '%s%s\n' $prefix $path
                end
            case ''
            case '*'
                printf '%s\n' $line
        end
    end
end

complete -c sluice -f -a '(__sluice_complete)'
`
