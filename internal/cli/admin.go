package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/overrides"
)

const adminUsage = `Usage (the admin API must be on: admin.api and admin.token_file in the config file):
  sluice client list                          the per-client overrides in force
  sluice client show CLIENT                   one client's override
  sluice client set-tier CLIENT TIER [--until TIME]
                                              put a client (a value of tiers.from, such as an API key) in a tier
  sluice client set-limit CLIENT --rule RULE --limit N --period DURATION
                 [--algorithm A] [--burst N] [--timezone ZONE] [--until TIME]
                                              give a client its own limit for a rule
  sluice client set-anchor CLIENT ANCHOR [--until TIME]
                                              start a client's calendar quotas (period: month...) at
                                              its own billing anchor, such as 15T09:00; "" for none
  sluice client remove CLIENT                 remove a client's override
  sluice key show [--rule RULE] [--client CLIENT] VALUE...
                                              a key's state under each of its limits, without charging it:
                                              used, remaining, and for calendar quotas the current period
  sluice key reset [--rule RULE] [--client CLIENT] VALUE...
                                              forget a key: its full quota is back
  sluice descriptor show DOMAIN KEY=VALUE...  a descriptor's counter in the rate-limit service, uncharged
  sluice descriptor reset DOMAIN KEY=VALUE... forget it: its full quota is back
  sluice descriptor set-limit DOMAIN KEY=VALUE... --limit N --period DURATION
                 [--algorithm A] [--burst N] [--until TIME]
                                              give that descriptor its own limit
  sluice descriptor list                      the descriptor overrides in force
  sluice descriptor remove DOMAIN KEY=VALUE...
                                              remove a descriptor's override

VALUE... are the values of the rule's key parts, in order (an IP address for
ip). Without --rule, every rule keyed by that many parts. KEY=VALUE... are
the entries of one descriptor, in order, as Envoy sends them (split at the
first =). TIME is RFC 3339,
such as 2026-12-31T00:00:00Z. Every command takes:
  --admin URL          the admin listener (default $SLUICE_ADMIN_URL, or http://127.0.0.1:9090)
  --token-file FILE    the file holding the admin token (default $SLUICE_ADMIN_TOKEN_FILE)
  --json               print the API's JSON answer
`

// adminClient is a command's connection to the admin API.
type adminClient struct {
	base   string
	token  string
	json   bool
	stdout io.Writer
}

// adminCommand runs "sluice client ...", "sluice key ..." and "sluice
// descriptor ...".
func adminCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	name := "sluice " + args[0] + " " + args[1]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, adminUsage) }
	base := fs.String("admin", envOr("SLUICE_ADMIN_URL", "http://127.0.0.1:9090"), "the admin listener's `URL`")
	tokenFile := fs.String("token-file", os.Getenv("SLUICE_ADMIN_TOKEN_FILE"), "the `FILE` holding the admin token")
	asJSON := fs.Bool("json", false, "print the API's JSON answer")
	rule := fs.String("rule", "", "the `RULE`")
	client := fs.String("client", "", "for key: add this `CLIENT`'s own limits")
	until := fs.String("until", "", "when the override ends (RFC 3339 `TIME`)")
	limit := fs.Int64("limit", 0, "the limit's count `N`")
	period := fs.String("period", "", "the limit's `DURATION`, such as 1m, or day, week, month or year")
	timezone := fs.String("timezone", "", "the `ZONE` of a calendar period, such as Europe/Berlin")
	algorithm := fs.String("algorithm", "", "the limit's algorithm (default: the rule's)")
	burst := fs.Int64("burst", 0, "the limit's burst `N` (buckets)")
	pos, err := parseInterspersed(fs, args[2:])
	if err != nil {
		return 2
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "%s: %s\n\n%s", name, msg, adminUsage)
		return 2
	}
	if *tokenFile == "" {
		return usage("--token-file is required (or set SLUICE_ADMIN_TOKEN_FILE)")
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "%s: reading the token: %v\n", name, err)
		return 1
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usage(fmt.Sprintf("--admin %q: want an http:// or https:// URL", *base))
	}
	if *until != "" {
		if _, err := time.Parse(time.RFC3339, *until); err != nil {
			return usage(fmt.Sprintf("--until %q: want an RFC 3339 time such as 2026-12-31T00:00:00Z", *until))
		}
	}
	c := &adminClient{base: strings.TrimRight(*base, "/") + "/admin/v1", token: strings.TrimSpace(string(tok)), json: *asJSON, stdout: stdout}
	clientURL := func() string { return c.base + "/clients/" + url.PathEscape(pos[0]) }
	var run func() error
	switch args[0] + " " + args[1] {
	case "client list":
		if len(pos) != 0 {
			return usage("takes no arguments")
		}
		run = func() error { return c.do(ctx, "GET", c.base+"/clients", nil, printClients) }
	case "client show":
		if len(pos) != 1 {
			return usage("want CLIENT")
		}
		run = func() error { return c.do(ctx, "GET", clientURL(), nil, printClient) }
	case "client remove":
		if len(pos) != 1 {
			return usage("want CLIENT")
		}
		run = func() error {
			return c.do(ctx, "DELETE", clientURL(), nil, func(w io.Writer, _ []byte) { fmt.Fprintf(w, "removed the override of %s\n", pos[0]) })
		}
	case "client set-tier", "client set-anchor":
		// The override's one field: its tier, or its billing anchor.
		field := strings.TrimPrefix(args[1], "set-")
		if len(pos) != 2 {
			return usage("want CLIENT " + strings.ToUpper(field))
		}
		body := map[string]any{field: pos[1]}
		if *until != "" {
			body["until"] = *until
		}
		run = func() error { return c.do(ctx, "PATCH", clientURL(), body, printClient) }
	case "client set-limit":
		if len(pos) != 1 || *rule == "" || *limit == 0 || *period == "" {
			return usage("want CLIENT --rule RULE --limit N --period DURATION")
		}
		l := map[string]any{"limit": *limit, "period": *period}
		if *algorithm != "" {
			l["algorithm"] = *algorithm
		}
		if *burst != 0 {
			l["burst"] = *burst
		}
		if *timezone != "" {
			l["timezone"] = *timezone
		}
		body := map[string]any{"limits": map[string]any{*rule: l}}
		if *until != "" {
			body["until"] = *until
		}
		run = func() error { return c.do(ctx, "PATCH", clientURL(), body, printClient) }
	case "key show", "key reset":
		if len(pos) == 0 && *rule == "" {
			return usage("want VALUE... (or --rule for a rule keyed by global alone)")
		}
		body := map[string]any{"key": append([]string{}, pos...)}
		if *rule != "" {
			body["rule"] = *rule
		}
		if *client != "" {
			body["client"] = *client
		}
		if args[1] == "show" {
			run = func() error { return c.do(ctx, "POST", c.base+"/keys/show", body, printKey) }
		} else {
			run = func() error { return c.do(ctx, "POST", c.base+"/keys/reset", body, printReset) }
		}
	case "descriptor list":
		if len(pos) != 0 {
			return usage("takes no arguments")
		}
		run = func() error { return c.do(ctx, "GET", c.base+"/descriptors/overrides", nil, printDescriptors) }
	case "descriptor show", "descriptor reset", "descriptor remove", "descriptor set-limit":
		if len(pos) < 2 {
			return usage("want DOMAIN KEY=VALUE...")
		}
		entries := make([]descriptor.Entry, 0, len(pos)-1)
		for _, p := range pos[1:] {
			k, v, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				return usage(fmt.Sprintf("entry %q: want KEY=VALUE", p))
			}
			entries = append(entries, descriptor.Entry{Key: k, Value: v})
		}
		body := map[string]any{"domain": pos[0], "entries": entries}
		ovURL := c.base + "/descriptors/overrides/" + url.PathEscape(overrides.DescriptorID(pos[0], entries))
		switch args[1] {
		case "show":
			run = func() error { return c.do(ctx, "POST", c.base+"/descriptors/show", body, printDescriptorState) }
		case "reset":
			run = func() error { return c.do(ctx, "POST", c.base+"/descriptors/reset", body, printDescriptorReset) }
		case "remove":
			run = func() error {
				return c.do(ctx, "DELETE", ovURL, nil, func(w io.Writer, _ []byte) {
					fmt.Fprintf(w, "removed the override of %s\n", overrides.DescriptorID(pos[0], entries))
				})
			}
		default:
			if *limit == 0 || *period == "" {
				return usage("want DOMAIN KEY=VALUE... --limit N --period DURATION")
			}
			l := map[string]any{"limit": *limit, "period": *period}
			if *algorithm != "" {
				l["algorithm"] = *algorithm
			}
			if *burst != 0 {
				l["burst"] = *burst
			}
			body := map[string]any{"limits": []any{l}}
			if *until != "" {
				body["until"] = *until
			}
			run = func() error { return c.do(ctx, "PUT", ovURL, body, printDescriptor) }
		}
	default:
		return usage(fmt.Sprintf("unknown command %q", args[0]+" "+args[1]))
	}
	if err := run(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
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
