package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const topUsage = `Usage: sluice top [--rule RULE] [--by limited|requests] [-n N] [--window 60|3600]
                  [--interval DURATION] [--once | --json] [--admin URL] [--token-file FILE]

Who is limited, live, through the admin API (the config file's admin.api
and admin.token_file turn it on): per rule, its decisions a second by
outcome over the last 10 s, and its clients most limited (or with the most
requests) over the last minute (or hour), refreshed in place until Ctrl-C.
Counts are those of the instance asked; with several gateways, ask each.

  sluice top                        every rule, live
  sluice top --rule api --once      one snapshot as text, for scripts
  sluice top --rule api --json      one snapshot of GET /admin/v1/top as JSON

Flags:
`

// topArgs are the flags of sluice top.
type topArgs struct {
	base, tokenFile, rule, by string
	n                         int
	window                    int
	interval                  time.Duration
	once, json                bool
}

func (a *topArgs) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("sluice top", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&a.base, "admin", envOr("SLUICE_ADMIN_URL", "http://127.0.0.1:9090"), "the admin listener's `URL`; SLUICE_ADMIN_URL sets the default")
	fs.StringVar(&a.tokenFile, "token-file", os.Getenv("SLUICE_ADMIN_TOKEN_FILE"), "the `FILE` holding the admin token; SLUICE_ADMIN_TOKEN_FILE sets the default")
	fs.StringVar(&a.rule, "rule", "", "only the `RULE` (a rule's or a descriptor's name)")
	fs.StringVar(&a.by, "by", "limited", "rank clients by `WHAT`: limited or requests")
	fs.IntVar(&a.n, "n", 5, "list `N` clients per rule (1 to 64)")
	fs.IntVar(&a.window, "window", 60, "over the last `SECONDS`: 60 or 3600")
	fs.DurationVar(&a.interval, "interval", 2*time.Second, "refresh every `DURATION`")
	fs.BoolVar(&a.once, "once", false, "print one snapshot as text and exit")
	fs.BoolVar(&a.json, "json", false, "print one snapshot of the API's JSON and exit")
	return fs
}

// check returns the problem with the flags' values, or "".
func (a *topArgs) check() string {
	switch {
	case a.by != "limited" && a.by != "requests":
		return fmt.Sprintf("--by %q: want limited or requests", a.by)
	case a.n < 1 || a.n > 64:
		return fmt.Sprintf("-n %d: want a whole number from 1 to 64", a.n)
	case a.window != 60 && a.window != 3600:
		return fmt.Sprintf("--window %d: want 60 or 3600", a.window)
	case a.interval < 100*time.Millisecond:
		return fmt.Sprintf("--interval %v: want at least 100ms", a.interval)
	case a.once && a.json:
		return "--once and --json: want one of them"
	}
	return ""
}

func topFlagSet(string) *flag.FlagSet {
	var a topArgs
	return a.flagSet()
}

// topCmd runs sluice top.
func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "sluice top"
	usage := func(format string, v ...any) int { return badUsage(stderr, name, name, format, v...) }
	var a topArgs
	fs := a.flagSet()
	pos, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, topUsage)
		printFlags(stdout, fs)
		return 0
	case err != nil:
		return usage("%v", err)
	case len(pos) > 0:
		return usage("want no arguments, got %q", strings.Join(pos, " "))
	}
	if p := a.check(); p != "" {
		return usage("%s", p)
	}
	if u, err := url.Parse(a.base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usage("--admin %q: want an http:// or https:// URL", a.base)
	}
	if a.tokenFile == "" {
		return usage("want --token-file FILE (or SLUICE_ADMIN_TOKEN_FILE), the file holding the admin token")
	}
	tok, err := os.ReadFile(a.tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, unreadable(a.tokenFile, "the admin token file", err))
		return 1
	}
	c := &adminClient{base: strings.TrimRight(a.base, "/") + "/admin/v1", token: strings.TrimSpace(string(tok)), json: a.json, stdout: stdout, stderr: stderr}
	q := url.Values{"by": {a.by}, "n": {strconv.Itoa(a.n)}, "window": {strconv.Itoa(a.window)}}
	if a.json {
		if a.rule != "" {
			q.Set("rule", a.rule)
		}
		if err := c.do(ctx, "GET", c.base+"/top?"+q.Encode(), nil, nil); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		return 0
	}
	if a.rule != "" {
		// The rule must exist: the API answers 404 with the rules in force.
		check := *c
		check.json, check.stdout = false, io.Discard
		if err := check.do(ctx, "GET", c.base+"/top?rule="+url.QueryEscape(a.rule)+"&n=1", nil, func(io.Writer, []byte) {}); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
	}
	q.Set("seconds", "10")
	snapshot := func(w io.Writer) error {
		return c.do(ctx, "GET", c.base+"/overview?"+q.Encode(), nil, func(_ io.Writer, b []byte) {
			printTop(w, b, a.rule, a.base)
		})
	}
	if a.once {
		if err := snapshot(stdout); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		return 0
	}
	// Live: each frame is written whole, after the cursor is sent home and
	// the screen cleared, so that it replaces the last one in place.
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		var frame strings.Builder
		if err := snapshot(&frame); err != nil {
			frame.Reset()
			fmt.Fprintf(&frame, "%s: %v\n", name, err)
		}
		fmt.Fprint(stdout, "\x1b[H\x1b[2J"+frame.String())
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
	}
}

// overviewReply is what sluice top reads of GET /admin/v1/overview.
type overviewReply struct {
	Time   time.Time `json:"time"`
	Health *struct {
		Backend  string `json:"backend"`
		Degraded bool   `json:"degraded"`
	} `json:"health"`
	Rules []struct {
		Name          string   `json:"name"`
		Kind          string   `json:"kind"`
		Allowed       []uint64 `json:"allowed"`
		Limited       []uint64 `json:"limited"`
		ShadowLimited []uint64 `json:"shadow_limited"`
		Errors        []uint64 `json:"error"`
		Top           struct {
			By      string `json:"by"`
			Window  int    `json:"window"`
			Entries []struct {
				Key      string `json:"key"`
				Requests uint64 `json:"requests"`
				Limited  uint64 `json:"limited"`
				Error    uint64 `json:"error"`
			} `json:"entries"`
		} `json:"top"`
	} `json:"rules"`
}

// printTop prints an overview as sluice top shows it: a line about the
// store, then each rule (or only rule) with its rates a second and its
// top clients.
func printTop(w io.Writer, b []byte, rule, admin string) {
	var o overviewReply
	if err := json.Unmarshal(b, &o); err != nil {
		fmt.Fprintf(w, "the admin API's answer is not the overview expected: %v\n", err)
		return
	}
	head := fmt.Sprintf("sluice top  %s  %s", admin, o.Time.Local().Format("15:04:05"))
	if h := o.Health; h != nil {
		state := "healthy"
		if h.Degraded {
			state = "DEGRADED (deciding per on_error)"
		}
		head += fmt.Sprintf("  store %s %s", h.Backend, state)
	}
	fmt.Fprintln(w, head)
	rate := func(v []uint64) string {
		var n uint64
		for _, x := range v {
			n += x
		}
		return strconv.FormatFloat(float64(n)/float64(max(len(v), 1)), 'f', 1, 64)
	}
	shown := 0
	for _, r := range o.Rules {
		if rule != "" && r.Name != rule {
			continue
		}
		shown++
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s (%s)\tallowed/s\tlimited/s\tshadow/s\terror/s\n", r.Name, r.Kind)
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\n", rate(r.Allowed), rate(r.Limited), rate(r.ShadowLimited), rate(r.Errors))
		tw.Flush()
		if len(r.Top.Entries) == 0 {
			fmt.Fprintf(w, "  nobody %s in the last %ds\n", map[string]string{"limited": "limited", "requests": "seen"}[r.Top.By], r.Top.Window)
			continue
		}
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  by %s, last %ds\tlimited\trequests\t±\t\n", r.Top.By, r.Top.Window)
		for _, e := range r.Top.Entries {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t\n", e.Key, e.Limited, e.Requests, e.Error)
		}
		tw.Flush()
	}
	if rule != "" && shown == 0 {
		fmt.Fprintf(w, "\nno rule %q has decided anything\n", rule)
	}
}
