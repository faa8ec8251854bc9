package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// Priority says which class (adaptive.Critical, Default or Sheddable) a
// request is in, for the adaptive concurrency rules (see
// ConcurrencyRule.Adaptive): under pressure the lowest class is shed
// first. The first of these that gives a class wins: From, Routes, Tiers,
// and then Default. The zero Priority puts every request in
// adaptive.Default.
type Priority struct {
	// From is the request attribute whose value names the class
	// ("critical", "default" or "sheddable", in any case; any other value
	// gives none): a header that a trusted layer in front sets, and
	// removes from clients' requests, or a verified token's claim
	// (JWT("priority")). A client that can set it can make itself
	// critical. The zero KeyPart gives no class.
	From KeyPart
	// Routes class requests by what they ask for, the first that matches
	// (by its Match, as a rule's) giving its class.
	Routes []PriorityRoute
	// Tiers gives the requests of a tier (see Options.Tiers; a client's
	// override's tier counts) a class.
	Tiers map[string]adaptive.Class
	// Default is the class of the requests nothing else classes. Default
	// adaptive.Default.
	Default adaptive.Class
}

// PriorityRoute gives the requests it matches a class.
type PriorityRoute struct {
	Match Match
	Class adaptive.Class
}

// validate checks p, whose routes' paths l has already lowered (unless
// paths are case-sensitive).
func (p *Priority) validate() error {
	if p.From != (KeyPart{}) {
		if err := p.From.validate(); err != nil {
			return fmt.Errorf("priority: %w", err)
		}
		if why := p.From.source().notTier; why != "" {
			return fmt.Errorf("%w: priority cannot come from the %s key part: %s", ErrInvalidRule, p.From, why)
		}
	}
	for i, r := range p.Routes {
		if err := r.Match.validate(fmt.Sprintf("priority route %d", i)); err != nil {
			return err
		}
		if !validClass(r.Class) {
			return fmt.Errorf("%w: priority route %d: unknown class %d", ErrInvalidRule, i, r.Class)
		}
	}
	for t, c := range p.Tiers {
		if err := CheckName("tier", t); err != nil {
			return fmt.Errorf("priority: %w", err)
		}
		if !validClass(c) {
			return fmt.Errorf("%w: priority: tier %q: unknown class %d", ErrInvalidRule, t, c)
		}
	}
	if !validClass(p.Default) {
		return fmt.Errorf("%w: priority: unknown default class %d", ErrInvalidRule, p.Default)
	}
	return nil
}

func validClass(c adaptive.Class) bool {
	return c == adaptive.Critical || c == adaptive.Default || c == adaptive.Sheddable
}

// classOf returns the request's class (see Priority).
func (l *Limiter) classOf(q *request) adaptive.Class {
	p := &l.priority
	if p.From != (KeyPart{}) {
		if v, ok := p.From.value(q); ok {
			if c, err := adaptive.ParseClass(v); err == nil {
				return c
			}
		}
	}
	for i := range p.Routes {
		if p.Routes[i].Match.matches(q.r, q.path) {
			return p.Routes[i].Class
		}
	}
	if len(p.Tiers) > 0 {
		if !q.tierDone {
			q.tierDone = true
			q.tier, q.ov = l.tierOf(q)
		}
		if c, ok := p.Tiers[q.tier]; ok {
			return c
		}
	}
	return p.Default
}

// admitAdaptive asks the adaptive concurrency rule i of the admitted
// request for a slot, waiting in its queue if the rule's limiter lets it.
// It reports whether the request may go on; if not, it has answered it
// (503 when shed, nothing when the client left while it waited), undone
// what the request took before, and told the Observer.
func (l *Limiter) admitAdaptive(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call, i int) bool {
	ev, e, rule := &c.ev, &c.events[i], c.rules[i]
	s, a, err := rule.adaptive.Acquire(r.Context(), c.class)
	e.Decision = sluice.Decision{Allowed: a.Admitted, Limit: int64(a.Limit), Remaining: int64(max(a.Limit-a.InFlight, 0)), RetryAfter: a.RetryAfter}
	switch {
	case errors.Is(a.FleetErr, adaptive.ErrFleetDegraded):
		e.Decision.Degraded = true
	case a.FleetErr != nil:
		e.Err = a.FleetErr
	}
	if err != nil {
		// The client left while it waited: not served.
		l.refuseLeases(ctx, c)
		e.Outcome = OutcomeCanceled
		ev.Outcome, ev.Delay = OutcomeCanceled, ev.Delay+a.Waited
		if l.obs != nil {
			l.obs.Observe(r, ev)
		}
		return false
	}
	if l.leaseObs != nil {
		le := LeaseEvent{Rule: rule.Name, Outcome: LeaseGranted, Waited: a.Waited, Adaptive: true, Class: a.Class, Reason: a.Reason}
		if !a.Admitted {
			le.Outcome = LeaseShed
		}
		l.leaseObs.ObserveLease(le)
	}
	if !a.Admitted {
		e.Outcome = OutcomeShed
		l.refuseLeases(ctx, c)
		ev.Outcome, ev.Delay = OutcomeShed, ev.Delay+a.Waited
		if l.obs != nil {
			l.obs.Observe(r, ev)
		}
		adaptive.WriteShed(w, a)
		return false
	}
	if a.Waited > 0 {
		e.Outcome = OutcomeDelayed
		ev.Delay += a.Waited
		if ev.Outcome == OutcomeAllowed {
			ev.Outcome = OutcomeDelayed
		}
	}
	c.slots = append(c.slots, s)
	return true
}

// slotsHandler serves next with the request's adaptive slots held: each
// takes its sample when the response's status is known, and is released
// when next returns (see adaptive.Serve).
func slotsHandler(slots []*adaptive.Slot, next http.Handler) http.Handler {
	for _, s := range slots {
		inner := next
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { adaptive.Serve(s, inner, w, r) })
	}
	return next
}

// adaptiveOf returns the limiter of the adaptive concurrency rule r: its
// own, or with a fleet limit (r.Concurrency.Limit) one that shares its
// state and also takes a slot of the fleet's on store.
func adaptiveOf(store sluice.Store, r *Rule) (*adaptive.Limiter, error) {
	cr := r.Concurrency
	if cr.Limit == 0 {
		return cr.Adaptive, nil
	}
	ls, ok := store.(sluice.LeaseStore)
	if !ok {
		return nil, fmt.Errorf("%w: rule %q: the store keeps no leases for a fleet limit (it is not a sluice.LeaseStore)", ErrInvalidRule, r.Name)
	}
	f, err := adaptive.NewFleet(ls, r.Name, cr.Limit, cr.Lease)
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	o := cr.Adaptive.Options()
	o.Fleet = f
	return cr.Adaptive.WithOptions(o)
}
