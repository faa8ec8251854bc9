package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"slices"
)

// CountMode says how a rule with a Count condition charges a request.
type CountMode uint8

// The count modes, by their configuration names.
const (
	// CountAfter checks the request before it goes (a client already at
	// the limit is rejected with 429 without reaching the handler) and
	// charges it once the response's status and headers are known, if they
	// match. The default. Concurrent requests of one client that are in
	// flight at once can exceed the limit by at most their number: each
	// passed the check before any was charged.
	CountAfter CountMode = iota
	// CountReserve charges the request before it goes, in the same atomic
	// decision as the check, and gives the unit back (sluice.Limiter.Refund)
	// once a response that does not match is known. The limit is never
	// exceeded, whatever the concurrency; while requests are in flight
	// their units are taken, so a client at the limit with requests in
	// flight may be refused a request that, once those are answered, would
	// have passed. Needs token_bucket or gcra (a window's count cannot be
	// given back exactly); a client whose override (Options.Overrides)
	// gives it a window algorithm is counted as CountAfter instead.
	CountReserve
)

var countModeNames = [...]string{CountAfter: "after", CountReserve: "reserve"}

// String returns the configuration name, such as "after".
func (m CountMode) String() string {
	if int(m) < len(countModeNames) {
		return countModeNames[m]
	}
	return fmt.Sprintf("countmode(%d)", m)
}

// ParseCountMode returns the count mode with the given configuration name.
func ParseCountMode(s string) (CountMode, error) {
	for i, n := range countModeNames {
		if s == n {
			return CountMode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown count mode %q (want after or reserve)", ErrInvalidRule, s)
}

// CountOn makes a rule count only the requests whose response matches: a
// status in Statuses, a status in one of Classes, or the response header
// Header set to a value other than "0" (by the application, which knows
// what a failed login is). At least one condition is required; any one
// matching counts the request. The header is removed from the response to
// every request the rule matches, whether or not it was counted.
//
// A response matches or not when its status and headers are known: when
// the handler calls WriteHeader (any status from 200 on, or 101), or writes
// or flushes the body first, or returns without writing (200). The charge
// or refund happens then, before the body is written.
type CountOn struct {
	// Statuses are response status codes, 100 to 599, such as 401.
	Statuses []int
	// Classes are status classes, 1 to 5: 4 for every 4xx status.
	Classes []int
	// Header is a response header the application sets on responses that
	// should count, such as "Sluice-Count".
	Header string
	// Mode says when the request is charged. Default CountAfter.
	Mode CountMode
}

// clone returns a copy of c that shares nothing with it.
func (c *CountOn) clone() *CountOn {
	n := *c
	n.Statuses = slices.Clone(c.Statuses)
	n.Classes = slices.Clone(c.Classes)
	return &n
}

// validateCount checks a rule's Count.
func (r *Rule) validateCount() error {
	c := r.Count
	if c == nil {
		return nil
	}
	if r.Action != Reject {
		return fmt.Errorf("%w: rule %q: count needs action reject, not %s", ErrInvalidRule, r.Name, r.Action)
	}
	if len(c.Statuses) == 0 && len(c.Classes) == 0 && c.Header == "" {
		return fmt.Errorf("%w: rule %q: count needs a status, a status class or a header", ErrInvalidRule, r.Name)
	}
	for _, s := range c.Statuses {
		if s < 100 || s > 599 {
			return fmt.Errorf("%w: rule %q: count status %d is not between 100 and 599", ErrInvalidRule, r.Name, s)
		}
	}
	for _, s := range c.Classes {
		if s < 1 || s > 5 {
			return fmt.Errorf("%w: rule %q: count status class %d is not between 1 (1xx) and 5 (5xx)", ErrInvalidRule, r.Name, s)
		}
	}
	if c.Header != "" && !isToken(c.Header) {
		return fmt.Errorf("%w: rule %q: count header %q is not a valid header name", ErrInvalidRule, r.Name, c.Header)
	}
	switch c.Mode {
	case CountAfter:
	case CountReserve:
		if !r.Limit.Algorithm.IsBucket() {
			return fmt.Errorf("%w: rule %q: count mode reserve needs algorithm token_bucket or gcra, not %s", ErrInvalidRule, r.Name, r.Limit.Algorithm)
		}
		for _, t := range sortedKeys(r.Tiers) {
			if a := r.Tiers[t].Algorithm; !a.IsBucket() {
				return fmt.Errorf("%w: rule %q tier %q: count mode reserve needs algorithm token_bucket or gcra, not %s", ErrInvalidRule, r.Name, t, a)
			}
		}
	default:
		return fmt.Errorf("%w: rule %q: unknown count mode %d", ErrInvalidRule, r.Name, c.Mode)
	}
	return nil
}

// matches reports whether a response with status code and header h counts.
func (c *CountOn) matches(code int, h http.Header) bool {
	if slices.Contains(c.Statuses, code) || slices.Contains(c.Classes, code/100) {
		return true
	}
	if c.Header != "" {
		if v := h.Get(c.Header); v != "" && v != "0" {
			return true
		}
	}
	return false
}

// reserves reports whether rule i of c is charged before the request goes
// and refunded after: a Count rule in reserve mode whose policy for this
// request (an override's, perhaps) can refund, for a key it enforces (see
// Rule.Enforce). Any other Count rule is checked before and charged after.
func (c *call) reserves(i int) bool {
	ct := c.rules[i].Count
	return ct != nil && ct.Mode == CountReserve && c.events[i].Action == Reject && c.policies[i].policy.CanReserve()
}

// refundCounted gives back the units that Count rules in reserve mode took
// for a request that will not be served after all (its client left while a
// Delay rule held it); such rules end OutcomeCanceled.
func (l *Limiter) refundCounted(ctx context.Context, c *call) {
	for i := range c.events {
		e := &c.events[i]
		if c.policies[i] == nil || e.Outcome != OutcomeAllowed || !c.reserves(i) {
			continue
		}
		if err := c.policies[i].lim.Refund(ctx, e.Key, 1); err != nil {
			e.Outcome, e.Err = OutcomeError, err
			continue
		}
		e.Outcome = OutcomeCanceled
	}
}

// counting reports whether an admitted request matched a Count rule: one
// to settle once its response is known, or (when the rule was skipped or
// its store failed) whose header is still to be removed from the response.
func (c *call) counting() bool {
	for i := range c.events {
		if c.rules[i].Count != nil {
			return true
		}
	}
	return false
}

// serveCounted passes an admitted request with Count rules to next through
// a ResponseWriter that settles the rules when the response's status is
// known, and then tells the Observer.
func (l *Limiter) serveCounted(ctx context.Context, w http.ResponseWriter, r *http.Request, next http.Handler, c *call) {
	cw := &c.cw // pooled with c: the handler must not keep it past returning, as net/http requires of any ResponseWriter
	*cw = countWriter{ResponseWriter: w, l: l, ctx: ctx, c: c}
	next.ServeHTTP(cw, r)
	if !cw.settled {
		cw.settle(http.StatusOK)
	}
	if l.obs != nil {
		l.obs.Observe(r, &c.ev)
	}
}

// settle charges (CountAfter) or refunds (CountReserve) each admitted Count
// rule of c for a response with status code and header h, and removes the
// rules' headers from h. A rule whose response does not match ends
// OutcomeNotCounted. A store error leaves the rule OutcomeError with Err
// set; the response goes on regardless.
func (l *Limiter) settle(ctx context.Context, c *call, code int, h http.Header) {
	for i := range c.events {
		e, ct, tp := &c.events[i], c.rules[i].Count, c.policies[i]
		if ct == nil || tp == nil || e.Outcome != OutcomeAllowed {
			continue
		}
		match := ct.matches(code, h)
		switch {
		case c.reserves(i) && !match:
			if err := tp.lim.Refund(ctx, e.Key, 1); err != nil {
				e.Outcome, e.Err = OutcomeError, err
				continue
			}
			e.Outcome = OutcomeNotCounted
		case c.reserves(i):
		case match:
			// Charged even past the limit's check: others in flight may
			// have been charged first; then this charge is refused, and
			// the key is at its limit either way.
			d, err := tp.lim.Allow(ctx, e.Key)
			if err != nil {
				e.Outcome, e.Err = OutcomeError, err
				continue
			}
			e.Decision = d
		default:
			e.Outcome = OutcomeNotCounted
		}
	}
	for i := range c.events {
		if ct := c.rules[i].Count; ct != nil && ct.Header != "" {
			h.Del(ct.Header)
		}
	}
}

// countWriter settles a request's Count rules when its response's status
// is known, before any of the body is written.
type countWriter struct {
	http.ResponseWriter
	l *Limiter
	// ctx is the request's, without its cancellation (see Handler): kept
	// because WriteHeader, where the settlement happens, takes none. It
	// lives no longer than the request.
	ctx     context.Context
	c       *call
	settled bool
}

func (w *countWriter) settle(code int) {
	w.settled = true
	w.l.settle(w.ctx, w.c, code, w.ResponseWriter.Header())
}

// WriteHeader settles on a final status (200 and above, or 101 Switching
// Protocols); informational statuses pass through.
func (w *countWriter) WriteHeader(code int) {
	if !w.settled && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.settle(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countWriter) Write(b []byte) (int, error) {
	if !w.settled {
		w.settle(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush settles as a 200 if no status was written, then flushes.
func (w *countWriter) Flush() {
	if !w.settled {
		w.settle(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (w *countWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
