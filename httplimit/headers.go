package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

// Header names, in canonical form.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
	headerLimit           = "X-Ratelimit-Limit"
	headerRemaining       = "X-Ratelimit-Remaining"
	headerReset           = "X-Ratelimit-Reset"
	headerRetryAfter      = "Retry-After"
)

// ProblemType is the type URI of the 429 problem details, as registered
// for quota errors by draft-ietf-httpapi-ratelimit-headers.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ProblemTypeUnavailable is the type URI of the 503 problem details sent
// when the store cannot decide and the request is refused: the server's
// capacity is reduced for a while, whatever the client's use of its quota
// ("temporary-reduced-capacity", registered by
// draft-ietf-httpapi-ratelimit-headers).
const ProblemTypeUnavailable = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

// policyItem renders a limit as a RateLimit-Policy list member; see
// AppendPolicyItem.
func policyItem(name string, lim sluice.Limit) string {
	return string(AppendPolicyItem(make([]byte, 0, 48), name, lim))
}

// AppendPolicyItem appends lim as a member of a RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers-11) to b: name as a String, q (the
// quota: Count), w (the window: Period in whole seconds, rounded up; for a
// calendar quota its nominal length, with sluice-period naming the day,
// week, month or year) and, for buckets whose Burst differs from Count,
// sluice-burst. A name's quotes and
// backslashes are escaped and any byte a String cannot hold (outside
// printable ASCII) becomes "?". It is safe for concurrent use.
func AppendPolicyItem(b []byte, name string, lim sluice.Limit) []byte {
	b = appendString(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, lim.Count, 10)
	b = append(b, ";w="...)
	if lim.Calendar != nil {
		// A calendar quota's window varies (a month is 28 to 31 days): w
		// is its nominal length, and sluice-period names the period.
		u := lim.Calendar.Spec().Unit
		b = strconv.AppendInt(b, nominalSeconds[u], 10)
		b = append(b, ";sluice-period="...)
		b = append(b, u.String()...)
		return b
	}
	b = strconv.AppendInt(b, ceilSeconds(lim.Period), 10)
	if lim.Algorithm.IsBucket() && lim.Burst != 0 && lim.Burst != lim.Count {
		b = append(b, ";sluice-burst="...)
		b = strconv.AppendInt(b, lim.Burst, 10)
	}
	return b
}

// nominalSeconds is the w of a calendar quota's RateLimit-Policy item:
// a day, a week, 30 days, 365 days.
var nominalSeconds = map[calendar.Unit]int64{calendar.Day: 86400, calendar.Week: 7 * 86400, calendar.Month: 30 * 86400, calendar.Year: 365 * 86400}

// AppendLimitItem appends a member of a RateLimit field to b: name as a
// String (escaped as by AppendPolicyItem), r (the remaining quota, at least
// 0) and t (reset in whole seconds, rounded up).
func AppendLimitItem(b []byte, name string, remaining int64, reset time.Duration) []byte {
	b = appendString(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilSeconds(reset), 10)
}

// appendString appends s as a structured-field String (RFC 9651).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ceilSeconds returns d in whole seconds, rounded up, at least 1 for any
// positive d (delay-seconds cannot say "less than a second", and 0 would
// invite an immediate retry).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendItem appends a RateLimit list member; see AppendLimitItem.
func appendItem(b []byte, name string, remaining int64, reset time.Duration) []byte {
	return AppendLimitItem(b, name, remaining, reset)
}

// writeHeaders sets the rate-limit headers of an admitted request for the
// Reject or Delay rule closest to its limit: the fewest units remaining, and
// of those the longest until reset.
func (l *Limiter) writeHeaders(h http.Header, c *call) {
	if l.headers&HeadersNone != 0 {
		return
	}
	best := -1
	for i := range c.events {
		e := &c.events[i]
		if c.policies[i] == nil || (e.Action != Reject && e.Action != Delay) || e.Decision.Time.IsZero() {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &c.events[best].Decision
		if d := &e.Decision; d.Remaining < b.Remaining || (d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	e := &c.events[best]
	idx := [1]int{best}
	l.setHeaders(h, c, idx[:], e.Decision.ResetAfter)
}

// setHeaders sets the headers for the events at idx; reset is the time the
// RateLimit t parameter and X-RateLimit-Reset refer to. Every value is cut
// from one string and every slice from one array: two allocations in all.
func (l *Limiter) setHeaders(h http.Header, c *call, idx []int, reset time.Duration) {
	b := c.hdrBuf[:0]
	var ends [5]int
	if l.headers&HeadersIETF != 0 {
		for n, i := range idx {
			if n > 0 {
				b = append(b, ", "...)
			}
			b = append(b, c.policies[i].item...)
		}
		ends[0] = len(b)
		for n, i := range idx {
			if n > 0 {
				b = append(b, ", "...)
			}
			d := &c.events[i].Decision
			t := d.ResetAfter
			if !d.Allowed {
				t = d.RetryAfter
			}
			b = appendItem(b, c.events[i].Rule, d.Remaining, t)
		}
		ends[1] = len(b)
	}
	if l.headers&HeadersLegacy != 0 {
		d := &c.events[idx[0]].Decision
		b = strconv.AppendInt(b, d.Limit, 10)
		ends[2] = len(b)
		b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
		ends[3] = len(b)
		at := d.Time.Add(reset)
		sec := at.Unix()
		if at.Nanosecond() > 0 {
			sec++
		}
		b = strconv.AppendInt(b, sec, 10)
		ends[4] = len(b)
	}
	c.hdrBuf = b
	all := string(b)
	vals := make([]string, 0, 5)
	put := func(name string, from, to int) {
		vals = append(vals, all[from:to])
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if l.headers&HeadersIETF != 0 {
		put(headerRateLimitPolicy, 0, ends[0])
		put(headerRateLimit, ends[0], ends[1])
	}
	if l.headers&HeadersLegacy != 0 {
		put(headerLimit, ends[1], ends[2])
		put(headerRemaining, ends[2], ends[3])
		put(headerReset, ends[3], ends[4])
	}
}

// reject answers 429 for the rules that denied the request.
func (l *Limiter) reject(w http.ResponseWriter, c *call) {
	var idx []int
	var retry time.Duration
	for i := range c.events {
		if c.events[i].Outcome == OutcomeLimited {
			idx = append(idx, i)
			retry = max(retry, c.events[i].Decision.RetryAfter)
		}
	}
	secs := max(ceilSeconds(retry), 1)
	h := w.Header()
	if l.headers&HeadersNone == 0 && len(idx) > 0 {
		// The legacy headers describe one limit: the one that keeps the
		// client out longest.
		longest := 0
		for n, i := range idx {
			if c.events[i].Decision.RetryAfter > c.events[idx[longest]].Decision.RetryAfter {
				longest = n
			}
		}
		idx[0], idx[longest] = idx[longest], idx[0]
		l.setHeaders(h, c, idx, time.Duration(secs)*time.Second)
	}
	h[headerRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`+ProblemType+`","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry after `...)
	b = strconv.AppendInt(b, secs, 10)
	if secs == 1 {
		b = append(b, ` second."`...)
	} else {
		b = append(b, ` seconds."`...)
	}
	b = append(b, `,"violated-policies":[`...)
	for n, i := range idx {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, c.events[i].Rule...)
		b = append(b, '"')
	}
	b = append(b, `],"retry_after":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, "}\n"...)
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(b)
}

// unavailable answers 503 when the store could not decide and the request
// is refused: the limiter fails closed (Options.FailClosed), or the store
// failed closed by itself. It sends no rate-limit fields, which would tell
// the client it used a quota it did not use. Retry-After is the longest
// wait a store that failed closed asked for (its circuit breaker's
// cooldown), at least 1 second.
func (l *Limiter) unavailable(w http.ResponseWriter, c *call) {
	var retry time.Duration
	for i := range c.events {
		if e := &c.events[i]; errors.Is(e.Err, ErrFailedClosed) {
			retry = max(retry, e.Decision.RetryAfter)
		}
	}
	secs := max(ceilSeconds(retry), 1)
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`+ProblemTypeUnavailable+`","title":"Service Unavailable","status":503,"detail":"The rate limiter cannot decide; retry after `...)
	b = strconv.AppendInt(b, secs, 10)
	if secs == 1 {
		b = append(b, ` second."`...)
	} else {
		b = append(b, ` seconds."`...)
	}
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, "}\n"...)
	h := w.Header()
	h[headerRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(b)
}
