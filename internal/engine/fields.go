package engine

import (
	"net/textproto"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

// Style selects the rate-limit fields a face sends with its answer.
// Values combine with |.
type Style uint8

const (
	// IETF sends RateLimit-Policy and RateLimit, as
	// draft-ietf-httpapi-ratelimit-headers-11 defines them.
	IETF Style = 1 << iota
	// Legacy sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (a Unix time, in seconds).
	Legacy
	// Envoy sends envoyproxy/ratelimit's three fields (its
	// LIMIT_RESPONSE_HEADERS_ENABLED), named by Names: the limit, the
	// units remaining and the seconds until the reset.
	Envoy
	// RetryAfter sends Retry-After (seconds) on a refusal that a retry
	// can pass.
	RetryAfter
)

// Field names, as the specifications spell them.
const (
	NameRateLimitPolicy = "RateLimit-Policy"
	NameRateLimit       = "RateLimit"
	NameLimit           = "X-RateLimit-Limit"
	NameRemaining       = "X-RateLimit-Remaining"
	NameReset           = "X-RateLimit-Reset"
	NameRetryAfter      = "Retry-After"
)

// Field names in canonical form, as net/http keys headers by (and writes
// them on HTTP/1.1).
const (
	KeyRateLimitPolicy = "Ratelimit-Policy"
	KeyRateLimit       = "Ratelimit"
	KeyLimit           = "X-Ratelimit-Limit"
	KeyRemaining       = "X-Ratelimit-Remaining"
	KeyReset           = "X-Ratelimit-Reset"
	KeyRetryAfter      = "Retry-After"
)

// Names are the names of the Envoy style's fields, each in its spelling
// and in the canonical form net/http keys headers by.
type Names struct {
	Limit, Remaining, Reset string
	canon                   [3]string
}

// NewNames returns the names of the Envoy style's fields.
func NewNames(limit, remaining, reset string) *Names {
	n := &Names{Limit: limit, Remaining: remaining, Reset: reset}
	for i, s := range []string{limit, remaining, reset} {
		n.canon[i] = textproto.CanonicalMIMEHeaderKey(s)
	}
	return n
}

// Field is one rate-limit field: its name as specified, its name in
// canonical form (net/http's key), and its value.
type Field struct {
	Name, Key, Value string
}

// binding is what a request's rate-limit fields describe.
type binding struct {
	idx []int // the checks described: the first is the legacy fields'
	// wait is what the legacy and Envoy resets tell: until the limit is
	// full again when admitted or when no retry can pass, until a retry
	// would pass (in whole seconds) when refused.
	wait  time.Duration
	never bool  // no retry can pass
	secs  int64 // Retry-After, when a retry can pass
}

// bind chooses the checks the fields describe: for an admitted request,
// the enforced check closest to its limit (the fewest units remaining,
// then the longest until reset); for a refused one, every check that
// refused it, the one that keeps the client out longest first (a check no
// retry can pass before any other). Shadows never show.
func (c *Call) bind(v Verdict) (binding, bool) {
	b := binding{idx: c.shown[:0]}
	if v == Admitted {
		best := -1
		for i := range c.Checks {
			r := &c.Results[i]
			if m := c.Checks[i].Mode; m == Shadow || m == ShadowProbe || r.Never || r.Decision.Time.IsZero() ||
				(r.Outcome != Allowed && r.Outcome != Delayed) {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			o := &c.Results[best].Decision
			if d := &r.Decision; d.Remaining < o.Remaining || (d.Remaining == o.Remaining && d.ResetAfter > o.ResetAfter) {
				best = i
			}
		}
		if best < 0 {
			return b, false
		}
		b.idx = append(b.idx, best)
		b.wait = c.Results[best].Decision.ResetAfter
		c.shown = b.idx
		return b, true
	}
	longest := -1
	var retry time.Duration
	for i := range c.Checks {
		r := &c.Results[i]
		if r.Outcome != Limited {
			continue
		}
		t := c.reset(i)
		switch {
		case r.Never && !b.never:
			b.never, longest, retry = true, len(b.idx), t
		case b.never:
		case longest < 0 || t > retry:
			longest, retry = len(b.idx), t
		}
		b.idx = append(b.idx, i)
	}
	if len(b.idx) == 0 {
		return b, false
	}
	b.idx[0], b.idx[longest] = b.idx[longest], b.idx[0]
	if b.never {
		b.wait = retry
	} else {
		b.secs = max(CeilSeconds(retry), 1)
		b.wait = time.Duration(b.secs) * time.Second
	}
	c.shown = b.idx
	return b, true
}

// RetryAfter returns the whole seconds a refused request should wait
// before a retry (at least 1), and false when no retry can pass or no
// check refused it.
func (c *Call) RetryAfter() (int64, bool) {
	b, ok := c.bind(Refused)
	return b.secs, ok && !b.never
}

// ResetAfter returns the time check i's status and RateLimit t parameter tell:
// until the limit is full again when it admitted the request, until the
// request would be admitted when it refused it, until the limit is full
// again when no retry can pass, and the limit's period when its state is
// unknown (a limit that admits nothing, or a store that could not tell).
func (c *Call) ResetAfter(i int) time.Duration { return c.reset(i) }

func (c *Call) reset(i int) time.Duration {
	r := &c.Results[i]
	switch {
	case r.Never && r.Decision.Time.IsZero():
		if l := c.limit(i); l.Calendar == nil {
			return l.Period
		}
		return 0
	case r.Never, r.Decision.Allowed:
		return r.Decision.ResetAfter
	}
	return r.Decision.RetryAfter
}

// limit returns the limit check i's fields show: its policy's binding
// limit, or its Show limit.
func (c *Call) limit(i int) sluice.Limit {
	ch, d := &c.Checks[i], &c.Results[i].Decision
	if p := ch.Policy; p != nil && d.Index >= 0 && d.Index < p.Len() {
		return p.Limit(d.Index)
	}
	return ch.Show
}

// appendPolicyItem appends check i's RateLimit-Policy item to b: the
// check's Item when its first limit binds, rendered otherwise.
func (c *Call) appendPolicyItem(b []byte, i int) []byte {
	ch := &c.Checks[i]
	if ch.Item != "" && ch.Policy != nil && c.Results[i].Decision.Index == 0 {
		return append(b, ch.Item...)
	}
	return AppendPolicyItem(b, ch.Name, c.limit(i))
}

// capacity is the limit the legacy and Envoy fields show for check i: the
// most its binding limit can hold, as sluice.Decision.Limit, so that the
// units remaining never exceed it.
func (c *Call) capacity(i int) int64 {
	if d := &c.Results[i].Decision; !d.Time.IsZero() {
		return d.Limit
	}
	l := c.limit(i)
	if l.Algorithm.IsBucket() && l.Burst != 0 {
		return l.Burst
	}
	return l.Count
}

// Fields appends to dst the rate-limit fields of style for a request of
// verdict v (Admitted or Refused: an Unavailable request's client used no
// quota, and gets none), as the package describes, and returns it. Every
// value is cut from one string. names are the Envoy style's; now is the
// time a Legacy reset counts from when the decision has none (a limit
// that admits nothing), the clock's reading when now is zero: the clock is
// read only then.
func (c *Call) Fields(dst []Field, v Verdict, style Style, names *Names, now time.Time) []Field {
	if v == Unavailable || style == 0 {
		return dst
	}
	b, ok := c.bind(v)
	if !ok {
		return dst
	}
	buf := c.hdr[:0]
	var ends [9]int
	var keys [9]string
	var fieldNames [9]string
	k := 0
	mark := func(name, key string) {
		fieldNames[k], keys[k], ends[k] = name, key, len(buf)
		k++
	}
	if style&IETF != 0 {
		for n, i := range b.idx {
			if n > 0 {
				buf = append(buf, ", "...)
			}
			buf = c.appendPolicyItem(buf, i)
		}
		mark(NameRateLimitPolicy, KeyRateLimitPolicy)
		for n, i := range b.idx {
			if n > 0 {
				buf = append(buf, ", "...)
			}
			buf = AppendLimitItem(buf, c.Checks[i].Name, c.Results[i].Decision.Remaining, c.reset(i))
		}
		mark(NameRateLimit, KeyRateLimit)
	}
	if style&(Legacy|Envoy) != 0 {
		i := b.idx[0]
		d := &c.Results[i].Decision
		lim := c.capacity(i)
		if style&Legacy != 0 {
			buf = strconv.AppendInt(buf, lim, 10)
			mark(NameLimit, KeyLimit)
			buf = strconv.AppendInt(buf, max(d.Remaining, 0), 10)
			mark(NameRemaining, KeyRemaining)
			at := d.Time
			if at.IsZero() {
				at = now
			}
			if at.IsZero() {
				at = time.Now()
			}
			at = at.Add(b.wait)
			sec := at.Unix()
			if at.Nanosecond() > 0 {
				sec++
			}
			buf = strconv.AppendInt(buf, sec, 10)
			mark(NameReset, KeyReset)
		}
		if style&Envoy != 0 && names != nil {
			buf = strconv.AppendInt(buf, lim, 10)
			mark(names.Limit, names.canon[0])
			buf = strconv.AppendInt(buf, max(d.Remaining, 0), 10)
			mark(names.Remaining, names.canon[1])
			buf = strconv.AppendInt(buf, CeilSeconds(b.wait), 10)
			mark(names.Reset, names.canon[2])
		}
	}
	if v == Refused && !b.never && style&RetryAfter != 0 {
		buf = strconv.AppendInt(buf, b.secs, 10)
		mark(NameRetryAfter, KeyRetryAfter)
	}
	c.hdr = buf
	if k == 0 {
		return dst
	}
	all := string(buf)
	from := 0
	for j := range k {
		dst = append(dst, Field{Name: fieldNames[j], Key: keys[j], Value: all[from:ends[j]]})
		from = ends[j]
	}
	return dst
}

// AppendPolicyItem appends lim as a member of a RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers-11) to b: name as a String, q (the
// quota: Count), w (the window: Period in whole seconds, rounded up; for a
// calendar quota its nominal length, with sluice-period naming the day,
// week, month or year) and, for buckets whose Burst differs from Count,
// sluice-burst, what r can reach. A name's quotes and backslashes are
// escaped and any byte a String cannot hold (outside printable ASCII)
// becomes "?".
func AppendPolicyItem(b []byte, name string, lim sluice.Limit) []byte {
	b = AppendString(b, name)
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
	b = strconv.AppendInt(b, CeilSeconds(lim.Period), 10)
	if lim.Algorithm.IsBucket() && lim.Burst != 0 && lim.Burst != lim.Count {
		b = append(b, ";sluice-burst="...)
		b = strconv.AppendInt(b, lim.Burst, 10)
	}
	return b
}

// AppendConcurrencyItem appends a concurrency limit of limit requests in
// flight as a member of a RateLimit-Policy field to b, with the quota unit
// "concurrent-requests".
func AppendConcurrencyItem(b []byte, name string, limit int64) []byte {
	b = AppendString(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, limit, 10)
	return append(b, `;qu="concurrent-requests"`...)
}

// nominalSeconds is the w of a calendar quota's RateLimit-Policy item: a
// day, a week, 30 days, 365 days.
var nominalSeconds = map[calendar.Unit]int64{calendar.Day: 86400, calendar.Week: 7 * 86400, calendar.Month: 30 * 86400, calendar.Year: 365 * 86400}

// AppendLimitItem appends a member of a RateLimit field to b: name as a
// String (escaped as by AppendPolicyItem), r (the remaining quota, at least
// 0) and t (reset in whole seconds, rounded up).
func AppendLimitItem(b []byte, name string, remaining int64, reset time.Duration) []byte {
	b = AppendString(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, CeilSeconds(reset), 10)
}

// AppendString appends s as a structured-field String (RFC 9651).
func AppendString(b []byte, s string) []byte {
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

// CeilSeconds returns d in whole seconds, rounded up, so at least 1 for any
// positive d: how Sluice tells durations in fields and protocols that
// count in seconds (delay-seconds cannot say "less than a second", and 0
// would invite an immediate retry).
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
