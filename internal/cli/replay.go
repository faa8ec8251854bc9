package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/filewatch"
	"github.com/sluicehq/sluice/internal/replay"
)

const replayUsage = `Usage: sluice replay --config FILE [flags] LOG...

Decides the requests of access logs with FILE's rules, as sluice serve
would have decided them, and reports per rule the requests matched,
admitted, limited and delayed, the clients limited and when. LOG is a
file, "-" for the standard input, or a gzip file (by its name's .gz or its
content). Several LOGs are merged by time: rotated files, or the logs of
several gateways. Nothing is sent anywhere; FILE's upstream, listeners
and store are not used. See docs/replay.md.

Formats: combined (nginx's and Apache's, and nginx's "main" with
X-Forwarded-For after the user agent), json (one object per line; field
names per --json-fields, nginx's variable names by default), envoy
(Envoy's default access log format), istio (that of Istio's proxies,
which logs the client's address) and caddy (Caddy's JSON access log).

Flags:
`

// replayArgs are replay's flags.
type replayArgs struct {
	config, format, html, against, jsonFields, maxLimited string
	asJSON, suggest                                       bool
	tolerance                                             time.Duration
	top                                                   int
}

// replayFlags defines replay's flags on fs (shell completion lists them
// from here too).
func replayFlags(fs *flag.FlagSet, a *replayArgs) {
	fs.StringVar(&a.config, "config", "", "the config `FILE` whose rules decide (required)")
	fs.StringVar(&a.format, "format", "combined", "the logs' `FORMAT`: combined, json, envoy, istio or caddy")
	fs.BoolVar(&a.asJSON, "json", false, "print the report as one JSON document")
	fs.StringVar(&a.html, "html", "", "also write the report, with plots, to `FILE` (one self-contained HTML file)")
	fs.BoolVar(&a.suggest, "suggest", false, "report each client's peak rate per rule and the limits it suggests")
	fs.StringVar(&a.maxLimited, "max-clients-limited", "0.1%", "with --suggest, the largest `SHARE` of clients a suggested limit may limit, as 0.1% or 0.001")
	fs.StringVar(&a.against, "against", "", "also decide with the config `FILE` (the one in force) and compare the clients each limits")
	fs.DurationVar(&a.tolerance, "tolerance", 5*time.Second, "how far out of time order log lines may be and still be replayed in order")
	fs.StringVar(&a.jsonFields, "json-fields", "", "for --format json, the `FIELDS` to read, as time=ts,client=ip,method=verb,path=uri,status=code,header:X-Api-Key=key")
	fs.IntVar(&a.top, "top", 10, "how many `N` clients to list per rule")
}

func replayFlagSet(string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice replay", flag.ContinueOnError)
	replayFlags(fs, new(replayArgs))
	return fs
}

func replayCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("sluice replay", replayUsage, stderr)
	var a replayArgs
	replayFlags(c.FlagSet, &a)
	// Flags may come after the logs too: parse until every argument is
	// taken.
	var logs []string
	for rest := args; ; {
		if code, done := c.parse(rest, stdout); done {
			return code
		}
		if c.NArg() == 0 {
			break
		}
		logs = append(logs, c.Arg(0))
		rest = c.Args()[1:]
	}
	switch {
	case a.config == "":
		return c.fail("want --config FILE")
	case len(logs) == 0:
		return c.fail("want at least one LOG (- for the standard input)")
	case a.top <= 0:
		return c.fail("--top %d: want a number above 0", a.top)
	case a.tolerance < 0:
		return c.fail("--tolerance %v: want 0 or more", a.tolerance)
	}
	format, err := replay.ParseFormat(a.format)
	if err != nil {
		return c.fail("--format %s", strings.TrimPrefix(err.Error(), replay.ErrUsage.Error()+": unknown log format "))
	}
	fields, err := replay.ParseJSONFields(a.jsonFields)
	if err != nil {
		return c.fail("--json-fields: %s", strings.TrimPrefix(err.Error(), replay.ErrUsage.Error()+": "))
	}
	share, err := parseShare(a.maxLimited)
	if err != nil {
		return c.fail("--max-clients-limited %q: %v", a.maxLimited, err)
	}
	opts := replay.Options{ConfigName: a.config, Logs: logs, Stdin: stdin, Format: format, JSONFields: fields,
		Tolerance: a.tolerance, Suggest: a.suggest, MaxClientsLimited: share, Top: a.top}
	if opts.Config, err = loadConfig(a.config); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if a.against != "" {
		opts.AgainstName = a.against
		if opts.Against, err = loadConfig(a.against); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	rep, err := replay.Run(ctx, opts)
	if err != nil {
		if errors.Is(err, replay.ErrUsage) {
			return c.fail("%s", strings.TrimPrefix(err.Error(), replay.ErrUsage.Error()+": "))
		}
		fmt.Fprintf(stderr, "sluice replay: %s\n", strings.TrimPrefix(err.Error(), "replay: "))
		return 1
	}
	if a.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = replay.WriteText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice replay: writing the report: %v\n", err)
		return 1
	}
	if a.html != "" {
		if err := writeHTML(a.html, rep); err != nil {
			fmt.Fprintf(stderr, "sluice replay: %v\n", err)
			return 1
		}
	}
	if len(rep.ReadErrors) > 0 {
		fmt.Fprintf(stderr, "sluice replay: %d logs broke off; each was replayed up to the break: %s\n", len(rep.ReadErrors), strings.Join(rep.ReadErrors, "; "))
		return 1
	}
	return 0
}

// loadConfig reads and validates a config file as serve does.
func loadConfig(path string) (*config.Config, error) {
	data, err := readConfig(filewatch.New(path, nil, config.MaxSize), path)
	if err != nil {
		return nil, err
	}
	return config.ParseFile(data, path)
}

func writeHTML(path string, rep *replay.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("the HTML report: %w", err)
	}
	if err := replay.WriteHTML(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("the HTML report: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("the HTML report: %w", err)
	}
	return nil
}

// parseShare parses "0.1%" or "0.001" as a share from 0 to 1.
func parseShare(s string) (float64, error) {
	v, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("want a share such as 0.1% or 0.001")
	}
	if pct {
		f /= 100
	}
	if f < 0 || f > 1 {
		return 0, errors.New("want a share from 0% to 100%")
	}
	return f, nil
}
