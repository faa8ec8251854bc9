package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// acquireLeases takes a slot of every concurrency rule the admitted request
// matched, in order, waiting up to a Delay rule's MaxDelay for one. It
// reports whether the request may go on; if not, it has answered it (429
// when a rule has no free slot, 503 when the store failed and FailClosed is
// set), released the slots already taken, given back the rate rules'
// reservations and told the Observer. A store error otherwise lets the rule
// through without a slot (OutcomeError), as for rate rules.
func (l *Limiter) acquireLeases(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) bool {
	ev := &c.ev
	for i := range c.events {
		e, rule := &c.events[i], c.rules[i]
		if rule.conc == nil || e.Outcome != OutcomeAllowed {
			continue
		}
		var (
			lease *sluice.Lease
			d     sluice.Decision
			err   error
		)
		lease, d, err = rule.conc.Acquire(ctx, e.Key)
		if err == nil && !d.Allowed && rule.Action == Delay {
			waitStart := time.Now()
			lease, d, err = rule.conc.Wait(r.Context(), e.Key, rule.MaxDelay, 0)
			waited := time.Since(waitStart)
			if err != nil && r.Context().Err() != nil {
				// The client left while it waited: not served.
				l.refuseLeases(ctx, c)
				e.Outcome = OutcomeCanceled
				ev.Outcome, ev.Delay = OutcomeCanceled, ev.Delay+waited
				if l.obs != nil {
					l.obs.Observe(r, ev)
				}
				return false
			}
			if err == nil && d.Allowed {
				e.Outcome = OutcomeDelayed
				ev.Delay += waited
				if ev.Outcome == OutcomeAllowed {
					ev.Outcome = OutcomeDelayed
				}
			}
		}
		e.Decision = d
		switch {
		case err != nil:
			e.Outcome, e.Err = OutcomeError, err
			if l.failClosed {
				l.refuseLeases(ctx, c)
				ev.Outcome = OutcomeError
				if l.obs != nil {
					l.obs.Observe(r, ev)
				}
				unavailableConcurrency(w)
				return false
			}
			if ev.Outcome == OutcomeAllowed {
				ev.Outcome = OutcomeError
			}
		case !d.Allowed:
			e.Outcome = OutcomeLimited
			l.refuseLeases(ctx, c)
			ev.Outcome = OutcomeLimited
			if l.obs != nil {
				l.obs.Observe(r, ev)
			}
			l.tooManyConcurrentRule(w, rule, d)
			return false
		default:
			c.leases = append(c.leases, lease)
		}
	}
	return true
}

// refuseLeases undoes what an admitted request took before a concurrency
// rule refused it: its slots, its rate rules' reservations and counted
// units.
func (l *Limiter) refuseLeases(ctx context.Context, c *call) {
	l.releaseLeases(ctx, c)
	l.cancel(ctx, c)
	l.refundCounted(ctx, c)
}

// releaseLeases gives back the request's slots. A slot whose release fails
// expires by itself after its lease.
func (l *Limiter) releaseLeases(ctx context.Context, c *call) {
	for _, le := range c.leases {
		_ = le.Release(ctx)
	}
	clear(c.leases)
	c.leases = c.leases[:0]
}

// tooManyConcurrentRule answers 429 for the concurrency rule, with the
// rule's RateLimit-Policy and RateLimit fields when IETF headers are on.
func (l *Limiter) tooManyConcurrentRule(w http.ResponseWriter, rule *compiled, d sluice.Decision) {
	h := w.Header()
	if l.headers&HeadersIETF != 0 {
		p := appendString(nil, rule.Name)
		p = append(p, ";q="...)
		p = strconv.AppendInt(p, rule.Concurrency.Limit, 10)
		p = append(p, `;qu="concurrent-requests"`...)
		h[headerRateLimitPolicy] = []string{string(p)}
		b := appendString(nil, rule.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, max(ceilSeconds(d.RetryAfter), 1), 10)
		h[headerRateLimit] = []string{string(b)}
	}
	delete(h, headerReset) // a rate rule's, from writeHeaders
	if l.headers&HeadersLegacy != 0 {
		h[headerLimit] = []string{strconv.FormatInt(d.Limit, 10)}
		h[headerRemaining] = []string{strconv.FormatInt(d.Remaining, 10)}
	}
	tooManyConcurrent(w, rule.Name, d.RetryAfter)
}
