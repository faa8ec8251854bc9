package rls

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/httplimit"
)

// Header names, as the gateway writes them.
const (
	headerRateLimitPolicy = "RateLimit-Policy"
	headerRateLimit       = "RateLimit"
	headerLimit           = "X-RateLimit-Limit"
	headerRemaining       = "X-RateLimit-Remaining"
	headerReset           = "X-RateLimit-Reset"
	headerRetryAfter      = "Retry-After"
)

// headers returns the rate-limit headers for the client's response, as the
// gateway writes them: an admitted request's describe the enforced limit
// closest to its limit (fewest remaining, then longest until reset); a
// rejected one's describe every limit that rejected it, the legacy and
// envoyproxy/ratelimit ones the limit that keeps the client out longest. A
// request that can never pass (a cost beyond a limit's capacity, or a limit
// of zero requests) gets no Retry-After, and its legacy reset is when that
// limit is full again. Shadow limits never show. Every value is cut from
// one string.
func (s *Service) headers(c *call, over bool) []*corev3.HeaderValue {
	idx := c.idx[:0]
	// wait is what the legacy and envoyproxy/ratelimit resets tell: until
	// the limit is full again when admitted, until a retry would pass when
	// over, until the limit is full again when no retry can pass.
	var wait time.Duration
	never := false
	var secs int64 // Retry-After, when a retry can pass
	if !over {
		best := -1
		for i := range c.items {
			it := &c.items[i]
			if it.kind == kindNone || it.kind == kindOver || it.shadow || it.d.Time.IsZero() {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := &c.items[best].d
			if d := &it.d; d.Remaining < b.Remaining || (d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		idx = append(idx, best)
		wait = c.items[best].d.ResetAfter
	} else {
		longest := -1
		var retry time.Duration
		for i := range c.items {
			it := &c.items[i]
			if it.outcome != OutcomeLimited {
				continue
			}
			t := s.resetOf(c, i)
			switch {
			case it.kind == kindOver && !never: // the first limit that never admits the request keeps it out longest
				never, longest, retry = true, len(idx), t
			case never:
			case longest < 0 || t > retry:
				longest, retry = len(idx), t
			}
			idx = append(idx, i)
		}
		if len(idx) == 0 {
			return nil
		}
		idx[0], idx[longest] = idx[longest], idx[0]
		if never {
			wait = retry
		} else {
			secs = max(ceilSeconds(retry), 1)
			wait = time.Duration(secs) * time.Second
		}
	}
	c.idx = idx

	h := s.opts.Headers
	b := c.hdr[:0]
	var names [9]string
	var ends [9]int
	k := 0
	mark := func(name string) {
		names[k], ends[k] = name, len(b)
		k++
	}
	if h&HeadersIETF != 0 {
		for n, i := range idx {
			if n > 0 {
				b = append(b, ", "...)
			}
			r := c.ms[i].Rule
			b = httplimit.AppendPolicyItem(b, displayName(r), limitOf(r, c.items[i].d.Index))
		}
		mark(headerRateLimitPolicy)
		for n, i := range idx {
			if n > 0 {
				b = append(b, ", "...)
			}
			b = httplimit.AppendLimitItem(b, displayName(c.ms[i].Rule), c.items[i].d.Remaining, s.resetOf(c, i))
		}
		mark(headerRateLimit)
	}
	if h&(HeadersLegacy|HeadersEnvoy) != 0 {
		i := idx[0]
		d := &c.items[i].d
		lim := capacityOf(c, i)
		if h&HeadersLegacy != 0 {
			b = strconv.AppendInt(b, lim, 10)
			mark(headerLimit)
			b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
			mark(headerRemaining)
			now := d.Time
			if now.IsZero() {
				now = time.Now()
			}
			at := now.Add(wait)
			sec := at.Unix()
			if at.Nanosecond() > 0 {
				sec++
			}
			b = strconv.AppendInt(b, sec, 10)
			mark(headerReset)
		}
		if h&HeadersEnvoy != 0 {
			n := &s.opts.EnvoyHeaderNames
			b = strconv.AppendInt(b, lim, 10)
			mark(n.Limit)
			b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
			mark(n.Remaining)
			b = strconv.AppendInt(b, ceilSeconds(wait), 10)
			mark(n.Reset)
		}
	}
	if over && !never && h&HeadersRetryAfter != 0 {
		b = strconv.AppendInt(b, secs, 10)
		mark(headerRetryAfter)
	}
	c.hdr = b
	if k == 0 {
		return nil
	}
	all := string(b)
	vals := make([]corev3.HeaderValue, k)
	ptrs := make([]*corev3.HeaderValue, k)
	from := 0
	for j := range k {
		vals[j].Key, vals[j].Value = names[j], all[from:ends[j]]
		ptrs[j] = &vals[j]
		from = ends[j]
	}
	return ptrs
}

// resetOf is the time descriptor i's status and RateLimit t parameter
// tell: until the limit is full again when admitted, until the request
// would be admitted when over, until the limit is full again when the
// request can never be admitted (a cost beyond its capacity), and the
// limit's period for a limit whose state is unknown (zero requests per
// unit, or a store that could not tell).
func (s *Service) resetOf(c *call, i int) time.Duration {
	it := &c.items[i]
	switch {
	case it.kind == kindOver && it.d.Time.IsZero():
		return display(c.ms[i].Rule, it.d.Index).Period
	case it.kind == kindOver, it.d.Allowed:
		return it.d.ResetAfter
	}
	return it.d.RetryAfter
}

// capacityOf is the Limit the legacy and envoyproxy/ratelimit headers
// show for descriptor i: the most its binding limit can hold, as
// sluice.Decision.Limit, so that the units remaining never exceed it.
func capacityOf(c *call, i int) int64 {
	d := &c.items[i].d
	if !d.Time.IsZero() {
		return d.Limit
	}
	if p := c.ms[i].Rule.Policy; p != nil && d.Index >= 0 && d.Index < p.Len() {
		return p.Rule(d.Index).Burst()
	}
	return display(c.ms[i].Rule, d.Index).Count
}

// limitOf returns limit i of r as a sluice.Limit, for rendering.
func limitOf(r *descriptor.Rule, i int) sluice.Limit {
	if p := r.Policy; p != nil && i >= 0 && i < p.Len() {
		return p.Limit(i)
	}
	d := display(r, i)
	return sluice.Limit{Algorithm: sluice.FixedWindow, Count: d.Count, Period: d.Period}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
