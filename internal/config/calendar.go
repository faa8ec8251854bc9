package config

import (
	"strings"
	"time"
	_ "time/tzdata" // the zones a config file names load on a machine without zoneinfo

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/calendar"
)

// calendarFields are the fields of a rule's or a tier's calendar
// (rules[].calendar, rules[].tiers.NAME.calendar).
var calendarFields = []string{"anchor", "timezone", "week_start"}

// calSpec is a calendar mapping as written: when a calendar period starts.
type calSpec struct {
	anchor calendar.Anchor
	zone   *time.Location
	week   time.Weekday
	node   *yaml.Node
}

// period decodes a limit's period: a duration (10s to a year), or a
// calendar period (day, week, month or year: a word without digits), as
// rules[].period and the rate-limit service's rate_limit.period take it.
func (d *decoder) period(v *yaml.Node, path string) (time.Duration, calendar.Unit, bool) {
	if rv := resolve(v); rv.Kind == yaml.ScalarNode && rv.Tag == "!!str" && !strings.ContainsAny(rv.Value, "0123456789") {
		u, err := calendar.ParseUnit(rv.Value)
		if err != nil {
			d.add(v, path, "want a duration such as 10s, 1m or 1h, or a calendar period: day, week, month or year; got %q", rv.Value)
			return 0, 0, false
		}
		return 0, u, true
	}
	t, ok := d.duration(v, path, time.Microsecond, 365*24*time.Hour)
	return t, 0, ok
}

func (d *decoder) calendar(n *yaml.Node, path string) *calSpec {
	cs := &calSpec{node: n}
	d.fields(n, path, calendarFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		s, ok := d.str(v, p)
		if !ok {
			return
		}
		var err error
		switch key {
		case "anchor":
			cs.anchor, err = calendar.ParseAnchor(s)
		case "timezone":
			cs.zone, err = calendar.LoadZone(s)
		case "week_start":
			cs.week, err = calendar.ParseWeekday(s)
		}
		if err != nil {
			d.add(v, p, "%s", strings.TrimPrefix(err.Error(), calendar.ErrInvalid.Error()+" "))
		}
	})
	return cs
}

// calendarOf returns the calendar of a limit whose period is a calendar
// unit (nil for a duration), from its own calendar mapping or else from
// inherit (the rule's, for a tier). ok is false after a problem.
func (d *decoder) calendarOf(s *limitSpec, unit calendar.Unit, inherit *calSpec, path string) (c *calendar.Calendar, ok bool) {
	cs := s.cal
	if cs == nil {
		cs = inherit
	}
	if unit == 0 {
		if s.cal != nil {
			d.add(s.cal.node, path+".calendar", "a calendar applies only to a period of day, week, month or year, not a duration")
			return nil, false
		}
		return nil, true
	}
	spec := calendar.Spec{Unit: unit}
	if cs != nil {
		spec.Anchor, spec.Zone = cs.anchor, cs.zone
		if unit == calendar.Week {
			spec.WeekStart = cs.week
		} else if cs.week != time.Sunday {
			d.add(cs.node, path+".calendar.week_start", "a week start applies only to period: week, not %s", unit)
			return nil, false
		}
	}
	c, err := calendar.New(spec)
	if err != nil {
		at := s.periodNode
		if cs != nil {
			at = cs.node
		}
		d.add(at, path+".calendar", "%s", strings.TrimPrefix(err.Error(), calendar.ErrInvalid.Error()+": "))
		return nil, false
	}
	return c, true
}
