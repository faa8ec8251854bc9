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
	"runtime/debug"
	"strings"
)

const usage = `Sluice is a rate limiter for APIs: a gateway in front of any HTTP API, a
forward-auth endpoint for Caddy, nginx and Traefik, and a rate-limit service
for Envoy, on one engine and one store.

Usage:
  sluice serve --config FILE     run whatever FILE enables: the gateway,
                                 forward-auth, the rate-limit service, admin
  sluice check-config FILE       validate FILE; exit 1 with every problem found
  sluice client ...              per-client overrides, through the admin API
  sluice key ...                 look at or reset a key, through the admin API
  sluice descriptor ...          look at, reset or override a descriptor of the
                                 rate-limit service, through the admin API
  sluice version                 print the version (also: sluice --version)
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

Prints the version of this build of sluice (also: sluice --version).
`

// Run runs the command line args (without the program name) and returns the
// process exit code: 0 on success, 1 on failure, 2 on bad usage. serve runs
// until ctx is done, then shuts down gracefully.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return RunWithReady(ctx, args, stdout, stderr, nil)
}

// RunWithReady is Run, calling ready with the bound addresses once serve
// listens (tests start the gateway on port 0).
func RunWithReady(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr, ready)
	case "check-config":
		return checkConfig(args[1:], stdout, stderr)
	case "client", "key", "descriptor":
		return adminCommand(ctx, args, stdout, stderr)
	case "version":
		return versionCmd(args[1:], stdout, stderr)
	case "--version", "-version":
		return versionCmd(nil, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			// "sluice help CMD" is "sluice CMD -h", so that every command
			// documents itself in one place.
			if len(args) > 2 {
				fmt.Fprintf(stderr, "sluice help: want at most one COMMAND\n\n%s", usage)
				return 2
			}
			if args[1] == "help" {
				fmt.Fprint(stdout, usage)
				return 0
			}
			return RunWithReady(ctx, []string{args[1], "-h"}, stdout, stderr, ready)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// command is a subcommand's flag set and usage text.
type command struct {
	*flag.FlagSet
	usage string // printed before the flags' defaults, if it has flags
}

func newCommand(name, usage string, stderr io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse prints it, on stdout or stderr
	return &command{FlagSet: fs, usage: usage}
}

func (c *command) printUsage(w io.Writer) {
	fmt.Fprint(w, c.usage)
	out := c.Output()
	c.SetOutput(w)
	c.PrintDefaults()
	c.SetOutput(out)
}

// parse parses args. Asked for help (-h, -help, --help) it prints the usage
// on stdout and returns 0 and done; given a bad flag it prints the problem
// and the usage on stderr and returns 2 and done.
func (c *command) parse(args []string, stdout io.Writer) (code int, done bool) {
	err := c.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printUsage(stdout)
		return 0, true
	case err != nil:
		fmt.Fprintln(c.Output())
		c.printUsage(c.Output())
		return 2, true
	}
	return 0, false
}

// fail reports bad usage: the problem, then the usage, on stderr; it
// returns exit code 2.
func (c *command) fail(problem string) int {
	fmt.Fprintf(c.Output(), "%s: %s\n\n", c.Name(), problem)
	c.printUsage(c.Output())
	return 2
}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("sluice version", versionUsage, stderr)
	if code, done := c.parse(args, stdout); done {
		return code
	}
	if c.NArg() > 0 {
		return c.fail("want no arguments")
	}
	fmt.Fprintln(stdout, "sluice", version())
	return 0
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	c := newCommand("sluice serve", serveUsage, stderr)
	path := c.String("config", "", "the config `FILE` (required)")
	logFormat := c.String("log-format", "text", "log format: text or json")
	logLevel := c.String("log-level", "info", "log level: debug, info, warn or error")
	if code, done := c.parse(args, stdout); done {
		return code
	}
	if *path == "" || c.NArg() > 0 {
		return c.fail("want --config FILE and no other arguments")
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve:", err)
		return 2
	}
	return runGateway(ctx, *path, logger, stderr, ready)
}

func checkConfig(args []string, stdout, stderr io.Writer) int {
	c := newCommand("sluice check-config", checkConfigUsage, stderr)
	if code, done := c.parse(args, stdout); done {
		return code
	}
	if c.NArg() != 1 {
		return c.fail("want exactly one FILE")
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

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
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
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, errors.New("--log-format " + format + ": want text or json")
}
