package overrides

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

// Limit is one of an override's own limits, in the config file's terms: a
// client's for one rule, or one of a descriptor's.
type Limit struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// Period is a duration such as "1m", or a calendar period: "day",
	// "week", "month" or "year" (a quota renewed at the client's Anchor).
	Period string `json:"period"`
	Burst  int64  `json:"burst,omitempty"`
	// Timezone is the IANA zone of a calendar period; default UTC.
	Timezone string `json:"timezone,omitempty"`
}

func (l Limit) limit() (sluice.Limit, error) {
	a, err := sluice.ParseAlgorithm(l.Algorithm)
	if err != nil {
		return sluice.Limit{}, err
	}
	if u, err := calendar.ParseUnit(l.Period); err == nil {
		z, err := calendar.LoadZone(l.Timezone)
		if err != nil {
			return sluice.Limit{}, err
		}
		c, err := calendar.New(calendar.Spec{Unit: u, Zone: z})
		if err != nil {
			return sluice.Limit{}, err
		}
		lim := sluice.Limit{Algorithm: a, Count: l.Limit, Burst: l.Burst, Calendar: c}
		return lim, lim.Validate()
	}
	if l.Timezone != "" {
		return sluice.Limit{}, fmt.Errorf("timezone %q: applies only to a period of day, week, month or year", l.Timezone)
	}
	p, err := time.ParseDuration(l.Period)
	if err != nil {
		return sluice.Limit{}, fmt.Errorf("period %q: want a duration such as 1m or 1h, or day, week, month or year", l.Period)
	}
	lim := sluice.Limit{Algorithm: a, Count: l.Limit, Period: p, Burst: l.Burst}
	return lim, lim.Validate()
}
