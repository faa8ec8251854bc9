package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
)

func TestCalendarRules(t *testing.T) {
	const file = `upstream: builtin:echo
tiers: { from: header:X-Plan, default: free }
rules:
  - name: monthly
    key: [header:X-API-Key]
    algorithm: fixed_window
    limit: 1000
    period: month
    calendar: { anchor: "15T09:00", timezone: Europe/Berlin }
    tiers:
      premium: { limit: 100000 }
      enterprise: { algorithm: sliding_window, limit: 5000000, period: year, calendar: { anchor: "04-01" } }
      trial: { limit: 50, period: 24h }
  - name: weekly
    algorithm: sliding_window
    limit: 10
    period: week
    calendar: { week_start: monday, anchor: "06:00", timezone: America/New_York }
  - name: daily
    algorithm: fixed_window
    limit: 10
    period: day
`
	c, err := config.Parse([]byte(file), "cal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Limiter.Rules
	for _, tc := range []struct {
		got  sluice.Limit
		want string
	}{
		{r[0].Limit, "fixed_window 1000/month anchor=15T09:00 zone=Europe/Berlin"},
		{r[0].Tiers["premium"], "fixed_window 100000/month anchor=15T09:00 zone=Europe/Berlin"},
		{r[0].Tiers["enterprise"], "sliding_window 5000000/year anchor=04-01"},
		{r[0].Tiers["trial"], "fixed_window 50/24h0m0s"},
		{r[1].Limit, "sliding_window 10/week start=monday anchor=T06:00 zone=America/New_York"},
		{r[2].Limit, "fixed_window 10/day"},
	} {
		if got := tc.got.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	if r[0].Tiers["trial"].Calendar != nil {
		t.Error("a tier with a duration period kept the rule's calendar")
	}
}

func TestCalendarProblems(t *testing.T) {
	const file = `upstream: builtin:echo
rules:
  - name: a
    algorithm: gcra
    limit: 10
    period: month
  - name: b
    algorithm: fixed_window
    limit: 10
    period: fortnight
  - name: c
    algorithm: fixed_window
    limit: 10
    period: month
    calendar: { anchor: "32", timezone: Mars/Olympus, week_start: funday }
  - name: d
    algorithm: fixed_window
    limit: 10
    period: 1h
    calendar: { anchor: "15" }
  - name: e
    algorithm: fixed_window
    limit: 10
    period: day
    calendar: { anchor: "15T09:00" }
  - name: f
    algorithm: fixed_window
    limit: 10
    period: month
    calendar: { week_start: monday }
  - name: g
    algorithm: fixed_window
    limit: 10
    period: month
    calendar: { color: blue }
`
	_, err := config.Parse([]byte(file), "cal.yaml")
	if err == nil {
		t.Fatal("got no error")
	}
	for _, want := range []string{
		`cal.yaml:6:13: rules[0].period: algo: invalid rule: gcra: calendar periods apply only to fixed_window and sliding_window`,
		`cal.yaml:10:13: rules[1].period: want a duration such as 10s, 1m or 1h, or a calendar period: day, week, month or year; got "fortnight"`,
		`cal.yaml:15:25: rules[2].calendar.anchor: anchor "32": the day must be 1 to 31`,
		`cal.yaml:15:41: rules[2].calendar.timezone: time zone "Mars/Olympus"`,
		`cal.yaml:15:67: rules[2].calendar.week_start: week start "funday"`,
		`cal.yaml:20:15: rules[3].calendar: a calendar applies only to a period of day, week, month or year`,
		`cal.yaml:25:15: rules[4].calendar: anchor 15T09:00: a day starts at a time of day only`,
		`cal.yaml:30:15: rules[5].calendar.week_start: a week start applies only to period: week`,
		`cal.yaml:35:17: rules[6].calendar.color: unknown field`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
}

// examples/plans.yaml gives each plan a rate and a monthly quota.
func TestPlansExample(t *testing.T) {
	c, err := config.Load("../../examples/plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var monthly *sluice.Limit
	for _, r := range c.Limiter.Rules {
		if r.Name == "api-monthly" {
			monthly = &r.Limit
			for tier, want := range map[string]string{
				"premium":    "fixed_window 1000000/month anchor=01 zone=Europe/Berlin",
				"enterprise": "sliding_window 50000000/month anchor=01 zone=Europe/Berlin",
			} {
				if got := r.Tiers[tier].String(); got != want {
					t.Errorf("tier %s: got %q, want %q", tier, got, want)
				}
			}
		}
	}
	if monthly == nil || monthly.String() != "fixed_window 10000/month anchor=01 zone=Europe/Berlin" {
		t.Errorf("api-monthly: got %v", monthly)
	}
}
