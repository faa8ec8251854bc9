// Package cli is the sluice command: it parses arguments, loads the config
// file and runs the gateway. Tests call Run directly.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strings"
)

const usage = `Sluice is a rate limiter for APIs: a gateway in front of any HTTP API, a
forward-auth endpoint for Caddy, nginx and Traefik, and a rate-limit service
for Envoy, on one engine and one store.

Usage:
  sluice serve --config FILE     run whatever FILE enables: the gateway,
                                 forward-auth, the rate-limit service, admin
  sluice check-config FILE       validate FILE; exit 1 with every problem found
  sluice replay --config FILE LOG...
                                 decide access logs with FILE's rules and report
                                 who would have been limited
  sluice client ...              per-client overrides, through the admin API
  sluice key ...                 look at or reset a key, through the admin API
  sluice descriptor ...          look at, reset or override a descriptor of the
                                 rate-limit service, through the admin API
  sluice top                     who is limited, live: each rule's rates and
                                 its most limited clients, through the admin API
  sluice version                 print the version (also: sluice --version)
  sluice completion SHELL        print the completion script for bash, zsh or fish
  sluice help [COMMAND]          print this help, or COMMAND's

Every command answers -h with its own usage. The config file format is
documented in docs/config.md; examples/quickstart.yaml is a complete example.
`

const serveUsage = `Usage: sluice serve --config FILE [--log-format text|json] [--log-level LEVEL]

Runs everything FILE enables (the gateway when it names an upstream, the
forward-auth endpoint, the rate-limit service, the admin listener) until
SIGTERM or Ctrl-C, then shuts down gracefully. SIGHUP, or a change of FILE
or of a file it names, reloads it and keeps every counter. A FILE with
problems is refused with every problem listed.

Flags:
`

const checkConfigUsage = `Usage: sluice check-config FILE

Validates FILE and prints a summary; exits 1 with every problem found, each
naming the field and its line, and prints warnings about settings that are
valid but risky.
`

const versionUsage = `Usage: sluice version

Prints the version of this build of sluice (also: sluice --version): the
module version, the commit it was built from and whether that tree had
uncommitted changes, and the Go version, as the Go toolchain recorded them.
`

// Run runs the command line args (without the program name) and returns the
// process exit code: 0 on success, 1 on failure, 2 on bad usage. serve runs
// until ctx is done, then shuts down gracefully.
//
// Every command answers the same way: asked for help (-h, --help, or
// "sluice help COMMAND") it prints its usage on stdout and returns 0; given
// bad usage it prints one line on stderr, naming the command and the
// problem, and a pointer to its -h, and returns 2.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return RunWithReady(ctx, args, stdout, stderr, nil)
}

// RunWithReady is Run, calling ready with the bound addresses once serve
// listens (tests start the gateway on port 0).
func RunWithReady(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	return run(ctx, args, os.Stdin, stdout, stderr, ready)
}

// RunWithStdin is Run reading the standard input (replay's "-") from
// stdin.
func RunWithStdin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, stdin, stdout, stderr, nil)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr, ready)
	case "check-config":
		return checkConfig(args[1:], stdout, stderr)
	case "replay":
		return replayCmd(ctx, args[1:], stdin, stdout, stderr)
	case "client", "key", "descriptor":
		return adminCommand(ctx, args, stdout, stderr)
	case "top":
		return topCmd(ctx, args[1:], stdout, stderr)
	case "version":
		return versionCmd(args[1:], stdout, stderr)
	case "completion":
		return completionCmd(args[1:], stdout, stderr)
	case "--version", "-version":
		return versionCmd(nil, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if args[0] != "help" || len(args) == 1 || slices.Contains([]string{"help", "-h", "-help", "--help"}, args[1]) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		// "sluice help CMD" is "sluice CMD -h", so that every command
		// documents itself in one place; the admin commands take their
		// subcommand too ("sluice help client set-tier").
		if _, admin := adminGroups[args[1]]; len(args) > 3 || (len(args) == 3 && !admin) {
			return badUsage(stderr, "sluice help", "sluice", "want one COMMAND, got %s", strings.Join(args[1:], " "))
		}
		switch args[1] {
		case "serve", "check-config", "replay", "version", "completion", "client", "key", "descriptor", "top":
			return run(ctx, append(slices.Clone(args[1:]), "-h"), stdin, stdout, stderr, ready)
		}
		return badUsage(stderr, "sluice help", "sluice", "unknown command %q", args[1])
	default:
		return badUsage(stderr, "sluice", "sluice", "unknown command %q", args[0])
	}
}

// badUsage reports bad usage of the command name: one line with the
// problem, then a pointer to the usage of command usageOf. It returns exit
// code 2.
func badUsage(stderr io.Writer, name, usageOf, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\nRun '%s -h' for usage.\n", name, fmt.Sprintf(format, args...), usageOf)
	return 2
}

// command is a subcommand's flag set and usage text.
type command struct {
	*flag.FlagSet
	usage   string // printed before the flags, if it has flags
	stderr  io.Writer
	usageOf string // the command whose -h documents this one
}

func newCommand(name, usage string, stderr io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports the problem in one line
	fs.Usage = func() {}
	return &command{FlagSet: fs, usage: usage, stderr: stderr, usageOf: name}
}

func (c *command) printUsage(w io.Writer) {
	fmt.Fprint(w, c.usage)
	printFlags(w, c.FlagSet)
}

// printFlags lists the flags of fs as the usage lines write them, with two
// dashes (the flag package accepts one or two): "--config FILE", then what
// it does and its default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, what := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			what += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, what)
	})
}

// parse parses args. Asked for help (-h, -help, --help) it prints the usage
// on stdout and returns 0 and done; given a bad flag it reports it as bad
// usage and returns 2 and done.
func (c *command) parse(args []string, stdout io.Writer) (code int, done bool) {
	err := c.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printUsage(stdout)
		return 0, true
	case err != nil:
		return c.fail("%v", err), true
	}
	return 0, false
}

// fail reports bad usage of the command; it returns exit code 2.
func (c *command) fail(format string, args ...any) int {
	return badUsage(c.stderr, c.Name(), c.usageOf, format, args...)
}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("sluice version", versionUsage, stderr)
	if code, done := c.parse(args, stdout); done {
		return code
	}
	if c.NArg() > 0 {
		return c.fail("want no arguments, got %q", strings.Join(c.Args(), " "))
	}
	fmt.Fprint(stdout, versionText(debug.ReadBuildInfo()))
	return 0
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	c := newCommand("sluice serve", serveUsage, stderr)
	path, logFormat, logLevel := serveFlags(c.FlagSet)
	if code, done := c.parse(args, stdout); done {
		return code
	}
	switch {
	case c.NArg() > 0:
		return c.fail("want --config FILE and no other arguments, got %q", strings.Join(c.Args(), " "))
	case *path == "":
		return c.fail("want --config FILE")
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return c.fail("%v", err)
	}
	return runGateway(ctx, *path, logger, stderr, ready)
}

// serveFlags defines serve's flags on fs (shell completion lists them from
// here too).
func serveFlags(fs *flag.FlagSet) (path, logFormat, logLevel *string) {
	return fs.String("config", "", "the config `FILE` (required)"),
		fs.String("log-format", "text", "the log `FORMAT`: text or json (JSON gives durations in seconds)"),
		fs.String("log-level", "info", "the log `LEVEL`: debug, info, warn or error")
}

func checkConfig(args []string, stdout, stderr io.Writer) int {
	c := newCommand("sluice check-config", checkConfigUsage, stderr)
	if code, done := c.parse(args, stdout); done {
		return code
	}
	switch {
	case c.NArg() == 0:
		return c.fail("want one FILE")
	case c.NArg() > 1:
		return c.fail("want one FILE, got %s", strings.Join(c.Args(), " "))
	}
	file := c.Arg(0)
	summary, warnings, err := check(file)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK (%s)\n", file, summary)
	return 0
}

// newLogger returns serve's logger: text (logfmt) or JSON lines on w, at
// the given level. JSON gives durations in seconds, as numbers (see
// durationSeconds); text gives them as Go writes them ("1.5s").
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = durationSeconds
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// durationSeconds writes a duration attribute as a number of seconds
// ("timeout":10, "retry_after":0.25), where slog's JSON handler would write
// nanoseconds: seconds are the unit of Retry-After, of the admin API's
// *_seconds fields and of every sluice metric, and a number, unlike a
// string such as "1m30s", is one that log shippers can compare, sum and
// graph as it is.
func durationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}
