package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/engine"
)

// acquireLeases takes a slot of every concurrency rule the admitted request
// matched, in order, waiting up to a Delay rule's MaxDelay for one; a rule
// with a rate too decides it with the slot (AcquireTake). It reports
// whether the request may go on; if not, it has answered it (429 when a
// rule has no free slot or its rate refused, 503 when the store failed and
// FailClosed is set or the store failed closed), released the slots already
// taken, given back the rate rules' reservations and told the Observer. A
// store error otherwise lets the rule through without a slot
// (OutcomeError), as for rate rules.
func (l *Limiter) acquireLeases(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) bool {
	ev := &c.ev
	for i := range c.events {
		e, rule := &c.events[i], c.rules[i]
		if rule.adaptive != nil && e.Outcome == OutcomeAllowed {
			if !l.admitAdaptive(ctx, w, r, c, i) {
				return false
			}
			continue
		}
		if rule.conc == nil || e.Outcome != OutcomeAllowed {
			continue
		}
		var (
			lease *sluice.Lease
			d     sluice.Decision
			err   error
		)
		tp := c.policies[i] // a rate decided with the slot, or nil
		var a sluice.Admission
		acquire := func(ctx context.Context, wait time.Duration) {
			switch {
			case tp != nil && wait > 0:
				lease, a, err = rule.conc.WaitTake(ctx, tp.lim, e.Key, 1, wait, 0)
			case tp != nil:
				lease, a, err = rule.conc.AcquireTake(ctx, tp.lim, e.Key, 1)
			case wait > 0:
				lease, d, err = rule.conc.Wait(ctx, e.Key, wait, 0)
			default:
				lease, d, err = rule.conc.Acquire(ctx, e.Key)
			}
			if tp != nil {
				d = a.Slot
				if !a.Rate.Allowed || a.Slot.Allowed {
					d = a.Rate // the rate's status, for the headers
				}
			}
		}
		acquire(ctx, 0)
		allowed := err == nil && (d.Allowed || tp != nil && a.Allowed())
		var waited time.Duration
		if err == nil && !allowed && rule.Action == Delay && !(d.Degraded && l.eng.FailsClosed()) {
			waitStart := l.clock.Now()
			acquire(r.Context(), rule.MaxDelay)
			allowed = err == nil && (d.Allowed || tp != nil && a.Allowed())
			waited = l.clock.Now().Sub(waitStart)
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
			if allowed {
				e.Outcome = OutcomeDelayed
				ev.Delay += waited
				if ev.Outcome == OutcomeAllowed {
					ev.Outcome = OutcomeDelayed
				}
			}
		}
		e.Decision = d
		if tp != nil && err == nil && (allowed || !a.Rate.Allowed) {
			// The rate decided with the slot shows in the headers as a
			// rate rule's does.
			out := engine.Result{Outcome: engine.Allowed, Decision: d}
			if !allowed {
				out.Outcome = engine.Limited
			}
			c.eng.Record(engine.Check{Policy: tp.policy, Key: e.Key, Cost: 1, Name: rule.Name, Item: tp.item}, out)
		}
		if l.leaseObs != nil {
			le := LeaseEvent{Rule: rule.Name, Waited: waited}
			slotDegraded := d.Degraded
			if tp != nil {
				slotDegraded = a.Slot.Degraded
			}
			switch {
			case err != nil || (!allowed && d.Degraded && l.eng.FailsClosed()):
				le.Outcome = LeaseError
			case allowed && slotDegraded:
				le.Outcome = LeaseFallback
			case allowed:
				le.Outcome = LeaseGranted
			case tp != nil && !a.Rate.Allowed:
				le.Outcome = LeaseNotAsked
			default:
				le.Outcome = LeaseRefused
			}
			l.leaseObs.ObserveLease(le)
		}
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
		case !allowed && d.Degraded && l.eng.FailsClosed():
			// No limit refused it: the store could not tell.
			e.Outcome, e.Err = OutcomeError, ErrFailedClosed
			l.refuseLeases(ctx, c)
			ev.Outcome = OutcomeError
			if l.obs != nil {
				l.obs.Observe(r, ev)
			}
			l.unavailable(w, c)
			return false
		case !allowed:
			e.Outcome = OutcomeLimited
			l.refuseLeases(ctx, c)
			ev.Outcome = OutcomeLimited
			if l.obs != nil {
				l.obs.Observe(r, ev)
			}
			switch {
			case tp != nil && !a.Rate.Allowed:
				l.reject(w, c) // the rate refused: its headers, as a rate rule's
			case tp != nil:
				l.tooManyConcurrentRule(w, rule, a.Slot)
			default:
				l.tooManyConcurrentRule(w, rule, d)
			}
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
// expires by itself after its lease. An adaptive rule's slot released here
// (the request was refused, or served, which released it already) gives
// no sample.
func (l *Limiter) releaseLeases(ctx context.Context, c *call) {
	for _, s := range c.slots {
		s.Release(ctx, adaptive.Ignored)
	}
	clear(c.slots)
	c.slots = c.slots[:0]
	for _, le := range c.leases {
		err := le.Release(ctx)
		if l.leaseObs != nil {
			out := LeaseReleased
			if errors.Is(err, sluice.ErrLeaseLost) {
				out = LeaseLost
			}
			l.leaseObs.ObserveLease(LeaseEvent{Rule: le.Name(), Outcome: out})
		}
	}
	clear(c.leases)
	c.leases = c.leases[:0]
}

// tooManyConcurrentRule answers 429 for the concurrency rule, with the
// rule's RateLimit-Policy and RateLimit fields when IETF headers are on.
func (l *Limiter) tooManyConcurrentRule(w http.ResponseWriter, rule *compiled, d sluice.Decision) {
	h := w.Header()
	if l.headers&HeadersIETF != 0 {
		p := engine.AppendString(nil, rule.Name)
		p = append(p, ";q="...)
		p = strconv.AppendInt(p, rule.Concurrency.Limit, 10)
		p = append(p, `;qu="concurrent-requests"`...)
		h[engine.KeyRateLimitPolicy] = []string{string(p)}
		b := engine.AppendString(nil, rule.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, max(engine.CeilSeconds(d.RetryAfter), 1), 10)
		h[engine.KeyRateLimit] = []string{string(b)}
	}
	delete(h, engine.KeyReset) // a rate rule's, from writeHeaders
	if l.headers&HeadersLegacy != 0 {
		h[engine.KeyLimit] = []string{strconv.FormatInt(d.Limit, 10)}
		h[engine.KeyRemaining] = []string{strconv.FormatInt(d.Remaining, 10)}
	}
	tooManyConcurrent(w, rule.Name, d.RetryAfter)
}

// LeaseObserver, when the Options' Observer implements it too, is told
// about the slots of concurrency rules: each request's asking for a slot,
// and each slot given back. ObserveLease is called from the request's
// goroutine; it must be fast, safe for concurrent use, and must not keep e.
type LeaseObserver interface {
	ObserveLease(e LeaseEvent)
}

// LeaseEvent is one concurrency rule's slot for one request.
type LeaseEvent struct {
	Rule    string
	Outcome LeaseOutcome
	// Waited is how long a Delay rule's request waited for its slot, or
	// an adaptive rule's in its queue (zero if one was free at once).
	Waited time.Duration
	// Adaptive reports that the rule is an adaptive concurrency rule:
	// Outcome is LeaseGranted or LeaseShed, and its slot's release is not
	// reported (the limiter counts its requests in flight).
	Adaptive bool
	// Class is, for an adaptive rule, the request's priority class.
	Class adaptive.Class
	// Reason is, for LeaseShed, why the adaptive rule shed the request.
	Reason adaptive.Reason
}

// LeaseOutcome is what became of a slot.
type LeaseOutcome uint8

// The outcomes of a LeaseEvent, with the names used as metric labels.
const (
	LeaseGranted  LeaseOutcome = iota // "granted": a slot was taken
	LeaseRefused                      // "refused": no slot was free (within MaxDelay); the request was answered 429
	LeaseError                        // "error": the store could not decide; the request went on without a slot, or was answered 503
	LeaseFallback                     // "fallback": a slot was granted by the store's failure path (a local fallback store, or none held anywhere)
	LeaseNotAsked                     // "not_asked": the rule's rate refused the request, so it took no slot
	LeaseReleased                     // "released": the slot was given back when the response ended (or the release failed: it expires by itself)
	LeaseLost                         // "lost": at release, the lease had already expired or been reset; its slot may have gone to another request meanwhile
	LeaseShed                         // "shed": an adaptive rule had no slot for the request's class (within its queue's wait, and its share of the fleet limit); the request was answered 503
)

var leaseOutcomeNames = [...]string{"granted", "refused", "error", "fallback", "not_asked", "released", "lost", "shed"}

// String returns the outcome's metric label, such as "granted".
func (o LeaseOutcome) String() string {
	if int(o) < len(leaseOutcomeNames) {
		return leaseOutcomeNames[o]
	}
	return "lease_outcome(" + strconv.Itoa(int(o)) + ")"
}
