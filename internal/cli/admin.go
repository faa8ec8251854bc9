package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/overrides"
)

// The admin commands' usage: one text for each group (client, key,
// descriptor), then what every command takes.
const (
	clientUsage = `Usage: sluice client COMMAND [ARGUMENTS] [FLAGS]

Per-client overrides, through the admin API (the config file's admin.api
and admin.token_file turn it on). A CLIENT is a value of the request
attribute that identifies clients: tiers.client, or tiers.from without it
(such as an API key); check-config says which.

  sluice client list                          the overrides in force
  sluice client show CLIENT                   one client's override
  sluice client set-tier CLIENT TIER [--until TIME]
                                              put a client in a tier that some rule knows
  sluice client set-limit CLIENT --rule RULE --limit N --period DURATION
                 [--algorithm A] [--burst N] [--timezone ZONE] [--until TIME]
                                              give a client its own limit for a rule
  sluice client set-anchor CLIENT ANCHOR [--until TIME]
                                              start a client's calendar quotas (period: month...) at
                                              its own billing anchor, such as 15T09:00; "" for none
  sluice client remove CLIENT                 remove a client's override

TIME is RFC 3339, such as 2026-12-31T00:00:00Z; after it the override
no longer applies. DURATION is such as 10s or 1h, or day, week, month or
year for a calendar quota.
`
	keyUsage = `Usage: sluice key COMMAND [--rule RULE] [--client CLIENT] VALUE... [FLAGS]

A key's counters, through the admin API (the config file's admin.api and
admin.token_file turn it on).

  sluice key show [--rule RULE] [--client CLIENT] VALUE...
                                              a key's state under each of its limits, without charging it:
                                              used, remaining, and for calendar quotas the current period
  sluice key reset [--rule RULE] [--client CLIENT] VALUE...
                                              forget a key: its full quota is back

VALUE... are the values of the rule's key parts, in order (an IP address
for ip; none for global). Without --rule, every rule keyed by that many
parts. With --client, the client's own limits too.
`
	descriptorUsage = `Usage: sluice descriptor COMMAND [DOMAIN KEY=VALUE...] [FLAGS]

The rate-limit service's counters and descriptor overrides, through the
admin API (the config file's admin.api and admin.token_file turn it on).

  sluice descriptor show DOMAIN KEY=VALUE...  a descriptor's counter, uncharged
  sluice descriptor reset DOMAIN KEY=VALUE... forget it: its full quota is back
  sluice descriptor set-limit DOMAIN KEY=VALUE... --limit N --period DURATION
                 [--algorithm A] [--burst N] [--until TIME]
                                              give that descriptor its own limit
  sluice descriptor list                      the descriptor overrides in force
  sluice descriptor remove DOMAIN KEY=VALUE...
                                              remove a descriptor's override

KEY=VALUE... are the entries of one descriptor, in order, as Envoy sends
them (split at the first =). TIME is RFC 3339, such as
2026-12-31T00:00:00Z.
`
)

// adminGroups are the admin commands: each group's usage and its
// subcommands, in the order the usage lists them.
var adminGroups = map[string]struct {
	usage string
	subs  []string
}{
	"client":     {clientUsage, []string{"list", "show", "set-tier", "set-limit", "set-anchor", "remove"}},
	"key":        {keyUsage, []string{"show", "reset"}},
	"descriptor": {descriptorUsage, []string{"show", "reset", "set-limit", "list", "remove"}},
}

// adminFlags lists the flags each admin command takes besides --admin,
// --token-file and --json.
var adminFlags = map[string][]string{
	"client set-tier":      {"until"},
	"client set-anchor":    {"until"},
	"client set-limit":     {"rule", "limit", "period", "algorithm", "burst", "timezone", "until"},
	"key show":             {"rule", "client"},
	"key reset":            {"rule", "client"},
	"descriptor set-limit": {"limit", "period", "algorithm", "burst", "until"},
}

// adminArgs are an admin command's flags.
type adminArgs struct {
	base, tokenFile                                  string
	json                                             bool
	rule, client, until, period, timezone, algorithm string
	limit, burst                                     int64
}

// flagSet defines, on a new flag set, the flags every admin command takes
// and those of the command named group+" "+sub.
func (a *adminArgs) flagSet(group, sub string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+group+" "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&a.base, "admin", envOr("SLUICE_ADMIN_URL", "http://127.0.0.1:9090"), "the admin listener's `URL`; SLUICE_ADMIN_URL sets the default")
	fs.StringVar(&a.tokenFile, "token-file", os.Getenv("SLUICE_ADMIN_TOKEN_FILE"), "the `FILE` holding the admin token; SLUICE_ADMIN_TOKEN_FILE sets the default")
	fs.BoolVar(&a.json, "json", false, "print the API's JSON answer")
	for _, f := range adminFlags[group+" "+sub] {
		switch f {
		case "rule":
			fs.StringVar(&a.rule, "rule", "", "the `RULE`, by name")
		case "client":
			fs.StringVar(&a.client, "client", "", "add this `CLIENT`'s own limits")
		case "until":
			fs.StringVar(&a.until, "until", "", "when the override ends (RFC 3339 `TIME`)")
		case "limit":
			fs.Int64Var(&a.limit, "limit", 0, "the limit's count `N`, at least 1")
		case "period":
			fs.StringVar(&a.period, "period", "", "the limit's `DURATION`, such as 1m, or day, week, month or year")
		case "timezone":
			fs.StringVar(&a.timezone, "timezone", "", "the `ZONE` of a calendar period, such as Europe/Berlin (default UTC)")
		case "algorithm":
			fs.StringVar(&a.algorithm, "algorithm", "", "the limit's algorithm `A`, such as gcra (default: the rule's)")
		case "burst":
			fs.Int64Var(&a.burst, "burst", 0, "the limit's burst `N`, at least 1 (buckets; default: the limit)")
		}
	}
	return fs
}

// printAdminUsage prints the usage of an admin group: its commands, then
// every flag they take.
func printAdminUsage(w io.Writer, group string) {
	g := adminGroups[group]
	fmt.Fprint(w, g.usage)
	fmt.Fprintln(w, "\nFlags (--admin, --token-file and --json for every command):")
	var a adminArgs
	all := a.flagSet(group, "")
	for _, sub := range g.subs {
		var own adminArgs
		own.flagSet(group, sub).VisitAll(func(f *flag.Flag) {
			if all.Lookup(f.Name) == nil {
				all.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	printFlags(w, all)
}

// adminClient is a command's connection to the admin API.
type adminClient struct {
	base   string
	token  string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// adminCommand runs "sluice client ...", "sluice key ..." and "sluice
// descriptor ...". Its checks come in the order a reader fixes them: the
// command, its flags, its arguments and their values, and only then the
// token file and the request.
func adminCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	group := args[0]
	g := adminGroups[group]
	usageOf := "sluice " + group
	if len(args) < 2 {
		return badUsage(stderr, usageOf, usageOf, "want a command: %s", orList(g.subs))
	}
	sub := args[1]
	switch sub {
	case "-h", "-help", "--help", "help":
		printAdminUsage(stdout, group)
		return 0
	}
	if !slices.Contains(g.subs, sub) {
		return badUsage(stderr, usageOf, usageOf, "unknown command %q: want %s", sub, orList(g.subs))
	}
	name := usageOf + " " + sub
	usage := func(format string, a ...any) int { return badUsage(stderr, name, usageOf, format, a...) }
	var a adminArgs
	fs := a.flagSet(group, sub)
	pos, err := parseInterspersed(fs, args[2:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		printAdminUsage(stdout, group)
		return 0
	case err != nil:
		return usage("%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["limit"] && a.limit < 1 {
		return usage("--limit %d: want a whole number of at least 1", a.limit)
	}
	if set["burst"] && a.burst < 1 {
		return usage("--burst %d: want a whole number of at least 1", a.burst)
	}
	if a.until != "" {
		if _, err := time.Parse(time.RFC3339, a.until); err != nil {
			return usage("--until %q: want an RFC 3339 time such as 2026-12-31T00:00:00Z", a.until)
		}
	}
	if u, err := url.Parse(a.base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usage("--admin %q: want an http:// or https:// URL", a.base)
	}
	c := &adminClient{base: strings.TrimRight(a.base, "/") + "/admin/v1", json: a.json, stdout: stdout, stderr: stderr}
	run, problem := c.command(ctx, group, sub, pos, &a)
	if problem != "" {
		return usage("%s", problem)
	}
	if a.tokenFile == "" {
		return usage("want --token-file FILE (or SLUICE_ADMIN_TOKEN_FILE), the file holding the admin token")
	}
	tok, err := os.ReadFile(a.tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, unreadable(a.tokenFile, "the admin token file", err))
		return 1
	}
	c.token = strings.TrimSpace(string(tok))
	if err := run(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// command checks the arguments pos and flags a of the admin command group
// sub and returns the request that runs it, or the problem with them.
func (c *adminClient) command(ctx context.Context, group, sub string, pos []string, a *adminArgs) (run func() error, problem string) {
	clientURL := func() string { return c.base + "/clients/" + url.PathEscape(pos[0]) }
	noArgs := func() string {
		if len(pos) != 0 {
			return fmt.Sprintf("want no arguments, got %q", strings.Join(pos, " "))
		}
		return ""
	}
	switch group + " " + sub {
	case "client list":
		return func() error { return c.do(ctx, "GET", c.base+"/clients", nil, printClients) }, noArgs()
	case "client show":
		if len(pos) != 1 {
			return nil, "want CLIENT"
		}
		return func() error { return c.do(ctx, "GET", clientURL(), nil, printClient) }, ""
	case "client remove":
		if len(pos) != 1 {
			return nil, "want CLIENT"
		}
		return func() error {
			return c.do(ctx, "DELETE", clientURL(), nil, func(w io.Writer, _ []byte) { fmt.Fprintf(w, "removed the override of %s\n", pos[0]) })
		}, ""
	case "client set-tier", "client set-anchor":
		// The override's one field: its tier, or its billing anchor.
		field := strings.TrimPrefix(sub, "set-")
		if len(pos) != 2 {
			return nil, "want CLIENT " + strings.ToUpper(field)
		}
		body := map[string]any{field: pos[1]}
		if a.until != "" {
			body["until"] = a.until
		}
		return func() error { return c.do(ctx, "PATCH", clientURL(), body, c.printClient) }, ""
	case "client set-limit":
		if len(pos) != 1 || a.rule == "" || a.limit == 0 || a.period == "" {
			return nil, "want CLIENT --rule RULE --limit N --period DURATION"
		}
		l := a.limitBody()
		if a.timezone != "" {
			l["timezone"] = a.timezone
		}
		body := map[string]any{"limits": map[string]any{a.rule: l}}
		if a.until != "" {
			body["until"] = a.until
		}
		return func() error { return c.do(ctx, "PATCH", clientURL(), body, c.printClient) }, ""
	case "key show", "key reset":
		if len(pos) == 0 && a.rule == "" {
			return nil, "want VALUE... (or --rule for a rule keyed by global alone)"
		}
		body := map[string]any{"key": append([]string{}, pos...)}
		if a.rule != "" {
			body["rule"] = a.rule
		}
		if a.client != "" {
			body["client"] = a.client
		}
		if sub == "show" {
			return func() error { return c.do(ctx, "POST", c.base+"/keys/show", body, printKey) }, ""
		}
		return func() error { return c.do(ctx, "POST", c.base+"/keys/reset", body, printReset) }, ""
	case "descriptor list":
		return func() error { return c.do(ctx, "GET", c.base+"/descriptors/overrides", nil, printDescriptors) }, noArgs()
	}
	// The descriptor commands that name one descriptor.
	if len(pos) < 2 {
		return nil, "want DOMAIN KEY=VALUE..."
	}
	entries := make([]descriptor.Entry, 0, len(pos)-1)
	for _, p := range pos[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Sprintf("entry %q: want KEY=VALUE", p)
		}
		entries = append(entries, descriptor.Entry{Key: k, Value: v})
	}
	body := map[string]any{"domain": pos[0], "entries": entries}
	id := overrides.DescriptorID(pos[0], entries)
	ovURL := c.base + "/descriptors/overrides/" + url.PathEscape(id)
	switch sub {
	case "show":
		return func() error { return c.do(ctx, "POST", c.base+"/descriptors/show", body, printDescriptorState) }, ""
	case "reset":
		return func() error { return c.do(ctx, "POST", c.base+"/descriptors/reset", body, printDescriptorReset) }, ""
	case "remove":
		return func() error {
			return c.do(ctx, "DELETE", ovURL, nil, func(w io.Writer, _ []byte) { fmt.Fprintf(w, "removed the override of %s\n", id) })
		}, ""
	}
	// set-limit
	if a.limit == 0 || a.period == "" {
		return nil, "want DOMAIN KEY=VALUE... --limit N --period DURATION"
	}
	put := map[string]any{"limits": []any{a.limitBody()}}
	if a.until != "" {
		put["until"] = a.until
	}
	return func() error { return c.do(ctx, "PUT", ovURL, put, printDescriptor) }, ""
}

// limitBody is the limit that --limit, --period, --algorithm and --burst
// give, as the API takes it.
func (a *adminArgs) limitBody() map[string]any {
	l := map[string]any{"limit": a.limit, "period": a.period}
	if a.algorithm != "" {
		l["algorithm"] = a.algorithm
	}
	if a.burst != 0 {
		l["burst"] = a.burst
	}
	return l
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments, which it returns; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// do sends a request to the API and prints its answer with print, or
// returns the problem it answered.
func (c *adminClient) do(ctx context.Context, method, u string, body any, print func(io.Writer, []byte)) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var p struct {
			Detail string `json:"detail"`
		}
		if json.Unmarshal(b, &p) != nil || p.Detail == "" {
			p.Detail = strings.TrimSpace(string(b))
		}
		return fmt.Errorf("%s (HTTP %d)", p.Detail, resp.StatusCode)
	}
	if c.json {
		c.stdout.Write(b)
		return nil
	}
	print(c.stdout, b)
	return nil
}

// printClient prints an override the API answered, and on stderr the
// warning it gave with it, if any (an anchor that no calendar quota
// uses, say).
func (c *adminClient) printClient(w io.Writer, b []byte) {
	printClient(w, b)
	var v struct {
		Warning string `json:"warning"`
	}
	if json.Unmarshal(b, &v) == nil && v.Warning != "" {
		fmt.Fprintln(c.stderr, "warning:", v.Warning)
	}
}

type entryJSON struct {
	Client string `json:"client"`
	Tier   string `json:"tier"`
	Limits map[string]struct {
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Period    string `json:"period"`
		Burst     int64  `json:"burst"`
	} `json:"limits"`
	Until  time.Time `json:"until"`
	Anchor string    `json:"anchor"`
}

func (e entryJSON) cells() []string {
	tier, until := e.Tier, "-"
	if tier == "" {
		tier = "-"
	}
	if !e.Until.IsZero() {
		until = e.Until.Format(time.RFC3339)
	}
	rules := make([]string, 0, len(e.Limits))
	for r := range e.Limits {
		rules = append(rules, r)
	}
	sort.Strings(rules)
	var ls []string
	for _, r := range rules {
		l := e.Limits[r]
		s := fmt.Sprintf("%s=%d/%s %s", r, l.Limit, l.Period, l.Algorithm)
		if l.Burst != 0 {
			s += fmt.Sprintf(" burst %d", l.Burst)
		}
		ls = append(ls, s)
	}
	limits := strings.Join(ls, "; ")
	if limits == "" {
		limits = "-"
	}
	anchor := e.Anchor
	if anchor == "" {
		anchor = "-"
	}
	return []string{e.Client, tier, limits, anchor, until}
}

func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func printClients(w io.Writer, b []byte) {
	var v struct {
		Clients []entryJSON `json:"clients"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	if len(v.Clients) == 0 {
		fmt.Fprintln(w, "no overrides")
		return
	}
	rows := make([][]string, len(v.Clients))
	for i, e := range v.Clients {
		rows[i] = e.cells()
	}
	table(w, []string{"CLIENT", "TIER", "LIMITS", "ANCHOR", "UNTIL"}, rows)
}

func printClient(w io.Writer, b []byte) {
	var e entryJSON
	if err := json.Unmarshal(b, &e); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	table(w, []string{"CLIENT", "TIER", "LIMITS", "ANCHOR", "UNTIL"}, [][]string{e.cells()})
}

// limitState is a limit's state as the admin API's keys/show and
// descriptors/show give it.
type limitState struct {
	Used        int64      `json:"used"`
	Remaining   int64      `json:"remaining"`
	Allowed     bool       `json:"allowed"`
	ResetAfter  float64    `json:"reset_after_seconds"`
	PeriodStart *time.Time `json:"period_start"`
	PeriodEnd   *time.Time `json:"period_end"`
}

func printKey(w io.Writer, b []byte) {
	var v struct {
		Limits []struct {
			Rule   string `json:"rule"`
			Tier   string `json:"tier"`
			Exempt bool   `json:"exempt"`
			Shadow bool   `json:"shadow"`
			Limit  *struct {
				Algorithm string `json:"algorithm"`
				Limit     int64  `json:"limit"`
				Period    string `json:"period"`
				Burst     int64  `json:"burst"`
				Calendar  string `json:"calendar"`
			} `json:"limit"`
			Concurrency *struct {
				Limit int64  `json:"limit"`
				Lease string `json:"lease"`
			} `json:"concurrency"`
			State *limitState `json:"state"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	var rows [][]string
	calendars := false
	for _, l := range v.Limits {
		tier := l.Tier
		if tier == "" {
			tier = "(default)"
		}
		reset := "-"
		if l.State != nil {
			reset = (time.Duration(l.State.ResetAfter * float64(time.Second))).Round(time.Millisecond).String()
		}
		if c := l.Concurrency; c != nil && l.State != nil {
			// Slots: in use, free, and when the last lease held expires.
			lim := fmt.Sprintf("%d in flight, lease %s", c.Limit, c.Lease)
			rows = append(rows, []string{l.Rule, "(slots)", lim, fmt.Sprint(l.State.Used), fmt.Sprint(l.State.Remaining), reset, "-"})
			continue
		}
		if l.Limit == nil || l.State == nil {
			rows = append(rows, []string{l.Rule, "-", "exempt", "-", "-", "-", "-"})
			continue
		}
		lim := fmt.Sprintf("%d/%s %s", l.Limit.Limit, l.Limit.Period, l.Limit.Algorithm)
		rule := l.Rule
		if l.Shadow {
			rule += " (shadow)"
		}
		period := "-"
		if s, e := l.State.PeriodStart, l.State.PeriodEnd; s != nil && e != nil {
			// The calendar's own zone, as the API gives it.
			period, calendars = s.Format("2006-01-02 15:04 MST")+" to "+e.Format("2006-01-02 15:04 MST"), true
		}
		rows = append(rows, []string{rule, tier, lim, fmt.Sprint(l.State.Used), fmt.Sprint(l.State.Remaining), reset, period})
	}
	header := []string{"RULE", "TIER", "LIMIT", "USED", "REMAINING", "FULL IN", "PERIOD"}
	if !calendars {
		header = header[:6]
		for i := range rows {
			rows[i] = rows[i][:6]
		}
	}
	table(w, header, rows)
}

func printReset(w io.Writer, b []byte) {
	var v struct {
		Reset []string `json:"reset"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	fmt.Fprintf(w, "reset in %s\n", strings.Join(v.Reset, ", "))
}

type limitDef struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Period    string `json:"period"`
	Burst     int64  `json:"burst"`
}

func (l limitDef) String() string {
	s := fmt.Sprintf("%d/%s %s", l.Limit, l.Period, l.Algorithm)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

type descriptorJSON struct {
	ID     string     `json:"id"`
	Limits []limitDef `json:"limits"`
	Until  time.Time  `json:"until"`
}

func (d descriptorJSON) cells() []string {
	ls := make([]string, len(d.Limits))
	for i, l := range d.Limits {
		ls[i] = l.String()
	}
	until := "-"
	if !d.Until.IsZero() {
		until = d.Until.Format(time.RFC3339)
	}
	return []string{d.ID, strings.Join(ls, "; "), until}
}

func printDescriptors(w io.Writer, b []byte) {
	var v struct {
		Overrides []descriptorJSON `json:"overrides"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	if len(v.Overrides) == 0 {
		fmt.Fprintln(w, "no descriptor overrides")
		return
	}
	rows := make([][]string, len(v.Overrides))
	for i, d := range v.Overrides {
		rows[i] = d.cells()
	}
	table(w, []string{"DESCRIPTOR", "LIMITS", "UNTIL"}, rows)
}

func printDescriptor(w io.Writer, b []byte) {
	var d descriptorJSON
	if err := json.Unmarshal(b, &d); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	table(w, []string{"DESCRIPTOR", "LIMITS", "UNTIL"}, [][]string{d.cells()})
}

func printDescriptorState(w io.Writer, b []byte) {
	var v struct {
		Applies string `json:"applies"`
		NoLimit string `json:"no_limit"`
		Shadow  bool   `json:"shadow"`
		Rule    *struct {
			Path       string `json:"path"`
			ShadowMode bool   `json:"shadow_mode"`
			DenyAll    bool   `json:"deny_all"`
		} `json:"rule"`
		Override       *descriptorJSON `json:"override"`
		Key            string          `json:"key"`
		Limits         []limitDef      `json:"limits"`
		LimitIndex     int             `json:"limit_index"`
		State          *limitState     `json:"state"`
		BlockedSeconds float64         `json:"blocked_seconds"`
		List           string          `json:"list"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	switch {
	case v.Applies == "deny_list":
		fmt.Fprintf(w, "refused before any counting: the descriptor carries a value on deny list %s (service.deny)\n", v.List)
		return
	case v.Applies == "none" && v.List != "":
		fmt.Fprintf(w, "no limit applies: the descriptor carries a value on allow list %s (service.allow)\n", v.List)
		return
	case v.Applies == "none":
		fmt.Fprintf(w, "no limit applies: %s\n", v.NoLimit)
		return
	}
	name := "(override)"
	if v.Override != nil {
		name = "override " + v.Override.ID
	}
	if v.Rule != nil && v.Applies == "rule" {
		name = v.Rule.Path
		if v.Rule.ShadowMode || v.Shadow {
			name += " (shadow mode)"
		}
		if v.Rule.DenyAll {
			fmt.Fprintf(w, "%s denies every request (zero requests per unit)\n", name)
			return
		}
	}
	key := v.Key
	if key == "" {
		key = "(shared)"
	}
	var rows [][]string
	header := []string{"LIMIT OF", "KEY", "LIMIT", "USED", "REMAINING", "NEXT PASSES", "FULL IN"}
	calendars := v.State != nil && v.State.PeriodStart != nil && v.State.PeriodEnd != nil
	if calendars {
		header = append(header, "PERIOD")
	}
	for i, l := range v.Limits {
		row := []string{name, key, l.String(), "-", "-", "-", "-"}
		if calendars {
			row = append(row, "-")
		}
		if s := v.State; s != nil && i == v.LimitIndex {
			reset := (time.Duration(s.ResetAfter * float64(time.Second))).Round(time.Millisecond).String()
			row[3], row[4], row[5], row[6] = fmt.Sprint(s.Used), fmt.Sprint(s.Remaining), fmt.Sprint(s.Allowed), reset
			if calendars {
				// The calendar's own zone, as the API gives it.
				row[7] = s.PeriodStart.Format("2006-01-02 15:04 MST") + " to " + s.PeriodEnd.Format("2006-01-02 15:04 MST")
			}
		}
		rows = append(rows, row)
	}
	table(w, header, rows)
	if v.BlockedSeconds > 0 {
		fmt.Fprintf(w, "blocked by the rule's penalty for %s more (sluice descriptor reset lifts it)\n",
			time.Duration(v.BlockedSeconds*float64(time.Second)).Round(time.Millisecond))
	}
}

func printDescriptorReset(w io.Writer, b []byte) {
	var v struct {
		Reset   bool   `json:"reset"`
		Applies string `json:"applies"`
		NoLimit string `json:"no_limit"`
		Policy  string `json:"policy"`
		Key     string `json:"key"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		fmt.Fprintf(w, "%s", b)
		return
	}
	if !v.Reset {
		fmt.Fprintf(w, "nothing to reset: %s\n", v.NoLimit)
		return
	}
	if v.Applies == "override" {
		fmt.Fprintln(w, "reset the counter of the descriptor's override")
		return
	}
	fmt.Fprintf(w, "reset %s key %q\n", v.Policy, v.Key)
}
