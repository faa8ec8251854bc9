package replay

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report for a person reading a terminal: the
// summary, a table of the rules, each rule's top limited clients and
// suggestion, the comparison, the notes, and the lines not replayed.
func WriteText(w io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Replayed %d requests from %d lines of %s (%s) with %s", rep.Requests, rep.Lines, strings.Join(rep.Logs, ", "), rep.Format, rep.Config)
	if rep.Requests > 0 {
		fmt.Fprintf(&b, ", %s to %s (%s)", rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339), rep.To.Sub(rep.From).Round(time.Second))
	}
	fmt.Fprintf(&b, "; lines up to %s out of time order sorted.\n", seconds(rep.ToleranceSeconds))
	fmt.Fprintf(&b, "Limited (429): %d   delayed: %d   denied (403): %d   matched by no rule: %d\n", rep.Limited, rep.Delayed, rep.Denied, rep.Unmatched)
	if rep.Unparsed > 0 {
		fmt.Fprintf(&b, "Not replayed: %d %s (", rep.Unparsed, plural(rep.Unparsed, "line", "lines"))
		for i, r := range rep.UnparsedReasons {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: %d", r.Reason, r.Lines)
		}
		b.WriteString("); listed below.\n")
	}
	if rep.Late > 0 {
		fmt.Fprintf(&b, "Late: %d requests logged more than %gs before one already decided, decided at the latest time reached.\n", rep.Late, rep.ToleranceSeconds)
	}
	for _, e := range rep.ReadErrors {
		fmt.Fprintf(&b, "Read error: %s (replayed up to it)\n", e)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "rule\taction\tmatched\tadmitted\tlimited\tdelayed\tmax delay\tskipped\tclients\tclients limited\n")
	for _, r := range rep.Rules {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n", r.Rule, r.Action, r.Matched, r.Admitted, r.Limited, r.Delayed,
			seconds(r.MaxDelaySeconds), r.Skipped, r.Clients, r.ClientsLimited)
	}
	tw.Flush()
	for _, r := range rep.Rules {
		if len(r.Top) > 0 {
			verb := "limited"
			if r.Action == "shadow" || r.Action == "soft" {
				verb = "would have limited"
			}
			fmt.Fprintf(&b, "\n%s %s %d of %d clients; most limited:\n", r.Rule, verb, r.ClientsLimited, r.Clients)
			for _, c := range r.Top {
				fmt.Fprintf(&b, "  %8d of %8d  %s\n", c.Limited, c.Requests, c.Key)
			}
		}
		if s := r.Suggest; s != nil {
			fmt.Fprintf(&b, "\n%s: peak requests per %s per client (%d clients): p50 %d, p90 %d, p99 %d, p99.9 %d, max %d\n",
				r.Rule, seconds(s.PeriodSeconds), s.Clients, s.P50, s.P90, s.P99, s.P999, s.Max)
			fmt.Fprintf(&b, "  a limit of %d per %s limits %d clients (at most %s); the rule's %d limits %d\n",
				s.Limit, seconds(s.PeriodSeconds), s.ClientsOverLimit, percent(s.MaxClientsLimited), s.CurrentLimit, s.ClientsOverCurrent)
		}
	}
	if c := rep.Against; c != nil {
		fmt.Fprintf(&b, "\nAgainst %s (which limited %d requests):\n", c.Config, c.Limited)
		fmt.Fprintf(&b, "  clients limited now and not before: %d\n", c.NewlyLimitedCount)
		for _, x := range c.NewlyLimited {
			fmt.Fprintf(&b, "    %8d  %s\n", x.Limited, x.Client)
		}
		fmt.Fprintf(&b, "  clients limited before and not now: %d\n", c.NoLongerLimitedCount)
		for _, x := range c.NoLongerLimited {
			fmt.Fprintf(&b, "    %8d  %s\n", x.Limited, x.Client)
		}
		for _, rc := range c.Rules {
			where := ""
			switch rc.In {
			case "new":
				where = " (new rule)"
			case "old":
				where = " (only in the old configuration)"
			}
			if rc.NewlyLimitedCount+rc.NoLongerLimitedCount == 0 && rc.In == "both" {
				fmt.Fprintf(&b, "  rule %s: limits the same keys\n", rc.Rule)
				continue
			}
			fmt.Fprintf(&b, "  rule %s%s: %d keys newly limited, %d no longer\n", rc.Rule, where, rc.NewlyLimitedCount, rc.NoLongerLimitedCount)
			for _, x := range rc.NewlyLimited {
				fmt.Fprintf(&b, "    + %8d  %s\n", x.Limited, x.Client)
			}
			for _, x := range rc.NoLongerLimited {
				fmt.Fprintf(&b, "    - %8d  %s\n", x.Limited, x.Client)
			}
		}
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	if len(rep.UnparsedLines) > 0 {
		fmt.Fprintf(&b, "\nLines not replayed (the first %d):\n", len(rep.UnparsedLines))
		for _, l := range rep.UnparsedLines {
			fmt.Fprintf(&b, "  %s:%d: %s\n", l.Log, l.Line, l.Reason)
		}
	}
	if len(rep.LateLines) > 0 {
		fmt.Fprintf(&b, "\nLate lines (the first %d):\n", len(rep.LateLines))
		for _, l := range rep.LateLines {
			fmt.Fprintf(&b, "  %s:%d: %s\n", l.Log, l.Line, l.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// seconds writes a number of seconds as a duration: "1m0s", "1.5s", "0s".
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).String()
}

// percent writes a share as a percentage: "0.1%".
func percent(share float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.4f", share*100), "0"), ".") + "%"
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
