// Package calendar places instants in calendar periods: days, weeks, months
// and years of a time zone's local calendar, starting at a billing anchor.
// A quota that renews "on the 15th at 09:00 Berlin time" is a Calendar of
// Unit Month with the Anchor {Day: 15, Clock: 9h} in Europe/Berlin; its
// periods have 28 to 31 days and, across daylight-saving changes, a whole
// number of local days but not of 24-hour days.
//
// # Boundaries
//
// A period starts at the first instant at which the zone's wall clock
// reads the anchor's date and time or later: an anchor time that a
// daylight-saving change skips (02:30 on the night the clocks go from 02:00
// to 03:00) starts the period at the change itself, and an anchor time that
// occurs twice (when the clocks go back) starts it at the first occurrence.
// Consecutive periods share their boundaries, so every instant belongs to
// exactly one period: no hour of quota is lost or counted twice. An anchor
// day beyond the end of a short month (the 29th to the 31st) is clamped to
// its last day: a month anchored on the 31st runs from January 31 to
// February 28 (29 in leap years), then to March 31.
//
// Zones come from the time package: the system's zoneinfo database, or the
// copy a program embeds by importing time/tzdata. The sluice command embeds
// it (about 400 KB), so that it works on a machine without a database; this
// package does not, so that library users who never name a zone do not pay
// for it.
package calendar

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Unit is the length of a calendar period. The zero value is invalid.
type Unit uint8

// The units, by their configuration names.
const (
	Day   Unit = iota + 1 // "day"
	Week                  // "week"
	Month                 // "month"
	Year                  // "year"
)

var unitNames = [...]string{Day: "day", Week: "week", Month: "month", Year: "year"}

// String returns the unit's configuration name, such as "month".
func (u Unit) String() string {
	if u >= Day && u <= Year {
		return unitNames[u]
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// ErrInvalid reports a calendar that can never work; the message says why.
var ErrInvalid = errors.New("calendar: invalid")

// ParseUnit returns the unit named s: day, week, month or year.
func ParseUnit(s string) (Unit, error) {
	for u := Day; u <= Year; u++ {
		if unitNames[u] == s {
			return u, nil
		}
	}
	return 0, fmt.Errorf("%w period %q: want day, week, month or year", ErrInvalid, s)
}

var weekdays = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// ParseWeekday returns the weekday named s in English, such as "monday"
// (any case).
func ParseWeekday(s string) (time.Weekday, error) {
	for i, w := range weekdays {
		if strings.EqualFold(w, s) {
			return time.Weekday(i), nil
		}
	}
	return 0, fmt.Errorf("%w week start %q: want a weekday such as monday", ErrInvalid, s)
}

// Anchor is when a period starts. Which fields apply depends on the unit:
// Clock for every unit, Day for months and years, Month for years only.
type Anchor struct {
	// Month is the month a year starts in; zero means January.
	Month time.Month
	// Day is the day of the month a month or year starts on, 1 to 31; zero
	// means 1. Days beyond a month's end mean its last day.
	Day int
	// Clock is the local time of day at which a period starts, from 0 to
	// 24h minus a second, in whole seconds.
	Clock time.Duration
}

// ParseAnchor parses an anchor written as an optional date, "DD" (the day
// of the month) or "MM-DD" (month and day), and an optional time of day,
// "THH:MM" or "THH:MM:SS" (the T may be left out when there is no date):
// "15", "15T09:00", "T09:00", "09:00", "03-01T00:00". The empty string is
// the zero Anchor.
func ParseAnchor(s string) (Anchor, error) {
	var a Anchor
	bad := func(why string) (Anchor, error) {
		return Anchor{}, fmt.Errorf("%w anchor %q: %s (want DD, MM-DD, THH:MM or DDTHH:MM, such as 15T09:00)", ErrInvalid, s, why)
	}
	date, clock, hasT := strings.Cut(s, "T")
	if !hasT && strings.Contains(s, ":") {
		date, clock = "", s
	}
	if hasT && clock == "" {
		return bad("no time after T")
	}
	if date != "" {
		m, d, hasM := strings.Cut(date, "-")
		if !hasM {
			m, d = "", date
		}
		day, ok := digits(d, 1, 2)
		if !ok || day < 1 || day > 31 {
			return bad("the day must be 1 to 31")
		}
		a.Day = day
		if hasM {
			mon, ok := digits(m, 1, 2)
			if !ok || mon < 1 || mon > 12 {
				return bad("the month must be 1 to 12")
			}
			if day > daysIn(time.Month(mon), 2000) {
				return bad(fmt.Sprintf("%s has no day %d", time.Month(mon), day))
			}
			a.Month = time.Month(mon)
		}
	}
	if clock != "" {
		parts := strings.Split(clock, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return bad("the time must be HH:MM or HH:MM:SS")
		}
		limits := []int{23, 59, 59}
		var v [3]int
		for i, p := range parts {
			n, ok := digits(p, 2, 2)
			if !ok || n > limits[i] {
				return bad("the time must be HH:MM or HH:MM:SS, from 00:00 to 23:59:59")
			}
			v[i] = n
		}
		a.Clock = time.Duration(v[0])*time.Hour + time.Duration(v[1])*time.Minute + time.Duration(v[2])*time.Second
	}
	return a, nil
}

// digits parses a decimal of min to max ASCII digits.
func digits(s string, min, max int) (int, bool) {
	if len(s) < min || len(s) > max {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// String returns the anchor in the form ParseAnchor reads, or "" for the
// zero Anchor.
func (a Anchor) String() string {
	var b strings.Builder
	switch {
	case a.Month != 0:
		fmt.Fprintf(&b, "%02d-%02d", int(a.Month), max(a.Day, 1))
	case a.Day != 0:
		fmt.Fprintf(&b, "%02d", a.Day)
	}
	if a.Clock != 0 {
		s := int64(a.Clock / time.Second)
		fmt.Fprintf(&b, "T%02d:%02d", s/3600, s/60%60)
		if s%60 != 0 {
			fmt.Fprintf(&b, ":%02d", s%60)
		}
	}
	return b.String()
}

// Spec describes a calendar. The zero Spec is invalid: Unit is required.
type Spec struct {
	// Unit is the period's length. Required.
	Unit Unit
	// Anchor is when each period starts; the zero Anchor is midnight on
	// the first of the month (and of January, for years).
	Anchor Anchor
	// Zone is the time zone of the wall clock. Nil means UTC.
	Zone *time.Location
	// WeekStart is the first day of a week, for Unit Week. The zero value
	// is Sunday.
	WeekStart time.Weekday
}

// Calendar is a validated Spec. Build one with New. It is immutable and
// safe for concurrent use.
type Calendar struct {
	spec  Spec
	name  string
	cache atomic.Pointer[[4]int64] // three consecutive periods' boundaries
}

// New validates spec and returns its calendar. Errors wrap ErrInvalid.
func New(spec Spec) (*Calendar, error) {
	a := spec.Anchor
	switch {
	case spec.Unit < Day || spec.Unit > Year:
		return nil, fmt.Errorf("%w: unit %d: want day, week, month or year", ErrInvalid, spec.Unit)
	case a.Clock < 0 || a.Clock >= 24*time.Hour || a.Clock%time.Second != 0:
		return nil, fmt.Errorf("%w: anchor time %v: want whole seconds from 00:00:00 to 23:59:59", ErrInvalid, a.Clock)
	case a.Day < 0 || a.Day > 31:
		return nil, fmt.Errorf("%w: anchor day %d: want 1 to 31", ErrInvalid, a.Day)
	case a.Month < 0 || a.Month > 12:
		return nil, fmt.Errorf("%w: anchor month %d: want 1 to 12", ErrInvalid, a.Month)
	case a.Month != 0 && a.Day > daysIn(a.Month, 2000):
		return nil, fmt.Errorf("%w: anchor %s: %s has no day %d", ErrInvalid, a, a.Month, a.Day)
	case spec.WeekStart < time.Sunday || spec.WeekStart > time.Saturday:
		return nil, fmt.Errorf("%w: week start %d", ErrInvalid, spec.WeekStart)
	case (spec.Unit == Day || spec.Unit == Week) && (a.Day != 0 || a.Month != 0):
		return nil, fmt.Errorf("%w: anchor %s: a %s starts at a time of day only (write THH:MM)", ErrInvalid, a, spec.Unit)
	case spec.Unit == Month && a.Month != 0:
		return nil, fmt.Errorf("%w: anchor %s: a month starts on a day of the month (write DD or DDTHH:MM)", ErrInvalid, a)
	case spec.Unit != Week && spec.WeekStart != time.Sunday:
		return nil, fmt.Errorf("%w: a week start applies to week periods only", ErrInvalid)
	}
	if spec.Zone == nil {
		spec.Zone = time.UTC
	}
	c := &Calendar{spec: spec}
	c.name = c.format()
	return c, nil
}

// LoadZone returns the IANA time zone named name, such as "Europe/Berlin"
// (see the package documentation for where the zone data comes from). The
// empty name and "UTC" are UTC; "Local" is refused, since a quota must not
// change with the machine it runs on.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%w time zone %q: name a zone, such as Europe/Berlin", ErrInvalid, name)
	}
	z, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w time zone %q: want an IANA name such as Europe/Berlin or America/New_York", ErrInvalid, name)
	}
	return z, nil
}

// Spec returns the calendar's spec, with Zone set.
func (c *Calendar) Spec() Spec { return c.spec }

// String returns the calendar in the form Parse reads, such as
// "month anchor=15T09:00 zone=Europe/Berlin". It identifies the calendar:
// two calendars with equal strings have the same periods.
func (c *Calendar) String() string { return c.name }

func (c *Calendar) format() string {
	s := c.spec
	var b strings.Builder
	b.WriteString(s.Unit.String())
	if s.Unit == Week {
		b.WriteString(" start=" + weekdays[s.WeekStart])
	}
	if a := s.Anchor.String(); a != "" {
		b.WriteString(" anchor=" + a)
	}
	if s.Zone != time.UTC {
		b.WriteString(" zone=" + s.Zone.String())
	}
	return b.String()
}

// Parse reads a calendar in the form String returns: a unit, then
// optional space-separated fields anchor=ANCHOR (see ParseAnchor),
// zone=NAME (see LoadZone) and, for weeks, start=WEEKDAY.
func Parse(s string) (*Calendar, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return nil, fmt.Errorf("%w calendar %q: want a period such as month", ErrInvalid, s)
	}
	u, err := ParseUnit(f[0])
	if err != nil {
		return nil, err
	}
	spec := Spec{Unit: u}
	seen := map[string]bool{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || seen[k] {
			return nil, fmt.Errorf("%w calendar %q: field %q: want anchor=, zone= or start=, each once", ErrInvalid, s, kv)
		}
		seen[k] = true
		switch k {
		case "anchor":
			spec.Anchor, err = ParseAnchor(v)
		case "zone":
			spec.Zone, err = LoadZone(v)
		case "start":
			spec.WeekStart, err = ParseWeekday(v)
		default:
			err = fmt.Errorf("%w calendar %q: unknown field %q", ErrInvalid, s, k)
		}
		if err != nil {
			return nil, err
		}
	}
	return New(spec)
}

// WithAnchor returns the calendar with the parts of a that apply to its
// unit: the time of day for every unit, the day for months and years, the
// month (when not zero) for years. It is how a client's own billing anchor
// is applied to a plan's calendar.
func (c *Calendar) WithAnchor(a Anchor) *Calendar {
	s := c.spec
	s.Anchor.Clock = a.Clock
	switch s.Unit {
	case Month:
		s.Anchor.Day = a.Day
	case Year:
		s.Anchor.Day = a.Day
		if a.Month != 0 {
			s.Anchor.Month = a.Month
		}
		if s.Anchor.Month != 0 && s.Anchor.Day > daysIn(s.Anchor.Month, 2000) {
			s.Anchor.Day = daysIn(s.Anchor.Month, 2000)
		}
	}
	if s == c.spec {
		return c
	}
	n, err := New(s)
	if err != nil { // unreachable: every field was valid or clamped
		return c
	}
	return n
}

// MaxLength is the longest any period of the calendar can be: 25 hours for
// days (a day when the clocks go back), 7 days and an hour for weeks, 31
// days and an hour for months, 366 days and an hour for years.
func (c *Calendar) MaxLength() time.Duration {
	switch c.spec.Unit {
	case Day:
		return 25 * time.Hour
	case Week:
		return 7*24*time.Hour + time.Hour
	case Month:
		return 31*24*time.Hour + time.Hour
	}
	return 366*24*time.Hour + time.Hour
}

// Period returns the period containing t, as nanoseconds since the Unix
// epoch: start <= t < end. It keeps the last period asked for and its two
// neighbours, so that the calls of one decision (a sliding window asks for
// the previous and the next period too) and of every key in the same
// period are answered without computing.
func (c *Calendar) Period(t int64) (start, end int64) {
	if b := c.cache.Load(); b != nil && b[0] <= t && t < b[3] {
		switch {
		case t < b[1]:
			return b[0], b[1]
		case t < b[2]:
			return b[1], b[2]
		}
		return b[2], b[3]
	}
	start, end = c.period(t)
	prev, _ := c.period(start - 1)
	_, next := c.period(end)
	c.cache.Store(&[4]int64{prev, start, end, next})
	return start, end
}

// Bounds returns the period containing t as times in the calendar's zone.
func (c *Calendar) Bounds(t time.Time) (start, end time.Time) {
	s, e := c.Period(t.UnixNano())
	return time.Unix(0, s).In(c.spec.Zone), time.Unix(0, e).In(c.spec.Zone)
}

// period computes the period containing t. A period is named by the local
// date on which it starts; boundary turns that date into an instant.
func (c *Calendar) period(t int64) (int64, int64) {
	lt := time.Unix(0, t).In(c.spec.Zone)
	y, m, d := lt.Date()
	a := c.spec.Anchor
	// k is the period containing lt's date (or the one after it, when the
	// anchor time on that date is still ahead); step moves by periods.
	var step func(k date, n int) date
	var k date
	switch c.spec.Unit {
	case Day:
		k = date{y, m, d}
		step = func(k date, n int) date { return k.add(0, n) }
	case Week:
		back := (int(lt.Weekday()) - int(c.spec.WeekStart) + 7) % 7
		k = date{y, m, d}.add(0, -back)
		step = func(k date, n int) date { return k.add(0, 7*n) }
	case Month:
		k = date{y, m, 1}
		step = func(k date, n int) date { return k.addMonths(n) }
	default:
		am := a.Month
		if am == 0 {
			am = time.January
		}
		k = date{y, am, 1}
		if m < am {
			k.y--
		}
		step = func(k date, n int) date { return date{k.y + n, k.m, 1} }
	}
	start := c.boundary(k)
	for start > t {
		k = step(k, -1)
		start = c.boundary(k)
	}
	end := c.boundary(step(k, 1))
	for end <= t {
		k = step(k, 1)
		start, end = end, c.boundary(step(k, 1))
	}
	return start, end
}

// date is a civil date; days beyond a month's end normalize as time.Date
// does.
type date struct {
	y int
	m time.Month
	d int
}

func (k date) add(months, days int) date {
	t := time.Date(k.y, k.m+time.Month(months), k.d+days, 0, 0, 0, 0, time.UTC)
	return date{t.Year(), t.Month(), t.Day()}
}

// addMonths moves a first-of-month date by n months.
func (k date) addMonths(n int) date { return date{k.y, k.m, 1}.add(n, 0) }

// boundary returns the instant at which the period named by k starts: the
// anchor's day (clamped to the month) and time on k's date.
func (c *Calendar) boundary(k date) int64 {
	a := c.spec.Anchor
	day := k.d
	if c.spec.Unit == Month || c.spec.Unit == Year {
		day = min(max(a.Day, 1), daysIn(k.m, k.y))
	}
	wall := time.Date(k.y, k.m, day, 0, 0, 0, 0, time.UTC).Unix() + int64(a.Clock/time.Second)
	return resolve(wall, c.spec.Zone) * int64(time.Second)
}

// resolve returns the first instant, in Unix seconds, at which the wall
// clock of zone reads wall (Unix seconds of the wall time as if in UTC) or
// later.
func resolve(wall int64, zone *time.Location) int64 {
	// Every offset in force within a day of wall is a candidate.
	best, found := int64(0), false
	for _, probe := range [...]int64{wall - 86400, wall, wall + 86400} {
		_, off := time.Unix(probe, 0).In(zone).Zone()
		u := wall - int64(off)
		if _, o := time.Unix(u, 0).In(zone).Zone(); o == off && (!found || u < best) {
			best, found = u, true
		}
	}
	if found {
		return best
	}
	// The wall time falls in a gap: the clocks jumped over it. The period
	// starts at the jump, the first instant whose wall time is later.
	u := wall - 86400
	for range 4 {
		_, end := time.Unix(u, 0).In(zone).ZoneBounds()
		if end.IsZero() {
			break
		}
		if lt := end.In(zone); wallSeconds(lt) >= wall {
			return end.Unix()
		}
		u = end.Unix()
	}
	return wall - 86400 // unreachable with real zone data
}

// wallSeconds returns t's wall clock as Unix seconds as if in UTC.
func wallSeconds(t time.Time) int64 {
	_, off := t.Zone()
	return t.Unix() + int64(off)
}

func daysIn(m time.Month, y int) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
