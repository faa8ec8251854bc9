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

const usage = `Sluice is a rate-limiting gateway for HTTP APIs.

Usage:
  sluice serve --config FILE     run the gateway described by FILE
  sluice check-config FILE       validate FILE; exit 1 with every problem found
  sluice version                 print the version

Run "sluice serve -h" for the serve flags. The config file format is
documented in README.md; examples/quickstart.yaml is a complete example.
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
		return serve(ctx, args[1:], stderr, ready)
	case "check-config":
		return checkConfig(args[1:], stdout, stderr)
	case "client", "key":
		return adminCommand(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "sluice", version())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func serve(ctx context.Context, args []string, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the config `FILE` (required)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "sluice serve: want --config FILE and no other arguments")
		fs.Usage()
		return 2
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve:", err)
		return 2
	}
	return runGateway(ctx, *path, logger, stderr, ready)
}

func checkConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "sluice check-config: want exactly one FILE")
		return 2
	}
	summary, warnings, err := check(args[0])
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK (%s)\n", args[0], summary)
	return 0
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
