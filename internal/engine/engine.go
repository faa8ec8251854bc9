// Package engine is Sluice's one decision procedure. Every face (the HTTP
// middleware and gateway, forward-auth, the Envoy rate-limit service and
// its /json form) turns its request into Checks (a policy, a key, a cost
// and how the check takes part) and hands them to an Engine, which decides
// them on the store, atomically where the store can, and answers with one
// kind of Result per check and a Verdict for the request. The face then
// turns those back into its protocol; choosing the limit its rate-limit
// fields describe, and rendering them, is done here too (Fields).
//
// The procedure, for one request:
//
//  1. Probe checks are looked at (Peek), charging nothing. One without
//     room for its cost refuses the request; a penalized one then counts a
//     strike, as a refused Take does.
//  2. Delay checks are reserved (Reserve), each up to its MaxDelay; one
//     that cannot be refuses the request.
//  3. Enforce checks are charged together (sluice.TakeAll): all of them,
//     or, if any is over its limit, none, and the request is refused. A
//     check whose cost its policy could never admit refuses the request
//     without asking the store.
//  4. Shadow checks are charged, each on its own, and ShadowProbe checks
//     looked at, only if the request is admitted; they never refuse it.
//
// A refused request is charged to nothing: the faces give back its
// reservations (Cancel). Once the request is refused, the checks not yet
// decided are Skipped, unless Options.Report asks for their status.
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/storekit"
)

// Mode says how a check takes part in a request's decision.
type Mode uint8

const (
	// Enforce charges the check with the request's other Enforce checks,
	// all or none; over its limit, it refuses the request.
	Enforce Mode = iota
	// Probe looks at the check's limit without charging it: without room
	// for Cost units it refuses the request. For counting by outcome
	// (charged after the response) and check-only descriptors
	// (hits_addend 0).
	Probe
	// Delay reserves the check's cost at the earliest time its limit
	// admits it, at most MaxDelay away: the request waits its turn (the
	// leaky bucket as a queue). Needs bucket limits.
	Delay
	// Shadow charges the check only if the request is admitted, and never
	// refuses: over its limit, its outcome is ShadowLimited.
	Shadow
	// ShadowProbe looks at the check's limit, as Probe does, and never
	// refuses: ShadowLimited when it has no room.
	ShadowProbe
)

// Check is one limit a request is decided against.
type Check struct {
	// Policy is the limit's policy; nil for a limit that admits nothing
	// (the request is refused without asking the store).
	Policy *sluice.Policy
	// Key is the request's key under Policy.
	Key string
	// Cost is the units the request is charged (Enforce, Delay, Shadow),
	// at least 1, or the units that must be left for it to pass (Probe,
	// ShadowProbe).
	Cost int64
	Mode Mode
	// MaxDelay is, for Delay, the longest wait the request accepts.
	MaxDelay time.Duration
	// Name names the limit in rate-limit fields.
	Name string
	// Show is the limit rendered in rate-limit fields when Policy is nil.
	Show sluice.Limit
	// Item, if not empty, is the RateLimit-Policy item of Policy's first
	// limit under Name, as AppendPolicyItem renders it, made once by the
	// face so that Fields need not render it for every request.
	Item string
}

// Outcome is what became of one check.
type Outcome uint8

const (
	// Allowed: the check admitted the request (and charged it, for
	// Enforce and Shadow).
	Allowed Outcome = iota
	// Limited: the check refused the request.
	Limited
	// Delayed: a Delay check admitted the request after a wait
	// (Decision.Delay).
	Delayed
	// ShadowLimited: a Shadow or ShadowProbe check was over its limit; the
	// request was not refused for it.
	ShadowLimited
	// Skipped: the check was not decided, the request being refused by
	// another.
	Skipped
	// Error: the store could not decide the check (Result.Err), or failed
	// closed (Err is ErrFailedClosed).
	Error
)

// Result is the answer for one check.
type Result struct {
	Outcome  Outcome
	Decision sluice.Decision
	Err      error
	// Never: the check's cost is more than its limit could ever admit
	// (or its limit admits nothing); no wait helps.
	Never bool
}

// Verdict is the answer for the request.
type Verdict uint8

const (
	// Admitted: no check refused the request.
	Admitted Verdict = iota
	// Refused: a check's limit refused the request.
	Refused
	// Unavailable: the store could not decide and failed closed (a
	// Degraded denial from a store whose FailsClosed reports true); no
	// limit refused the request.
	Unavailable
)

// ErrFailedClosed is the Result.Err of a check that the store could not
// decide and denied for it (see sluice.ClosedFailer).
var ErrFailedClosed = errors.New("the store could not decide and failed closed")

// Options configure an Engine.
type Options struct {
	// Report makes a refused request's checks all carry their status, as
	// Peek tells it, where the refusal left them undecided (the Envoy
	// service reports every descriptor's status). By default they are
	// Skipped and the store is not asked.
	Report bool
	// StopOnError ends the decision at the first store error, which
	// Decide returns (the Envoy service then fails the request). By
	// default the check is Error, Call.Failed is set, and the decision
	// goes on without it (fail open).
	StopOnError bool
	// FailClosed refuses a request a store error left a check of
	// unchecked: its verdict is Unavailable, and its Shadow checks are not
	// charged. By default such a request is admitted (fail open).
	FailClosed bool
	// DegradedDenials takes a store's Degraded denials as denials, even
	// from a store whose failure policy refuses what it cannot decide
	// (sluice.ClosedFailer), whose denials are by default failures (the
	// check is Error with ErrFailedClosed, the verdict Unavailable): for
	// a protocol that answers both alike, as the Envoy service's does.
	DegradedDenials bool
	// Tracer, if set, traces each decision and its store calls.
	Tracer Tracer
}

// Engine decides requests' checks on one store. It is safe for concurrent
// use.
type Engine struct {
	store       sluice.Store
	opts        Options
	failsClosed bool
}

// New returns an engine deciding on store.
func New(store sluice.Store, opts Options) *Engine {
	e := &Engine{store: store, opts: opts}
	if fc, ok := store.(sluice.ClosedFailer); ok && !opts.DegradedDenials {
		e.failsClosed = fc.FailsClosed()
	}
	return e
}

// Store returns the engine's store.
func (e *Engine) Store() sluice.Store { return e.store }

// FailsClosed reports whether the store's Degraded denials are failures to
// decide (see sluice.ClosedFailer).
func (e *Engine) FailsClosed() bool { return e.failsClosed }

// Call is one request's checks and their results, with the scratch space
// of its decision. Faces keep Calls in a pool: Reset empties one for the
// next request without freeing its memory. A Call is not safe for
// concurrent use.
type Call struct {
	Checks  []Check
	Results []Result
	// Failed reports that a store error let a check through unchecked.
	Failed bool

	// modes has bit 1<<m set for each Mode m among the checks, and
	// unbound reports a check without a policy: decide skips the passes
	// that no check needs.
	modes   uint8
	unbound bool

	reqs  []sluice.Request
	outs  []sluice.Decision
	idx   []int // each check's request in reqs, or -1
	shown []int // the checks the fields describe
	hdr   []byte
}

// Reset empties the call.
func (c *Call) Reset() {
	clear(c.Checks)
	c.Checks = c.Checks[:0]
	clear(c.Results)
	c.Results = c.Results[:0]
	c.Failed = false
	c.modes, c.unbound = 0, false
	clear(c.reqs)
	c.reqs = c.reqs[:0]
	c.outs = c.outs[:0]
	c.idx = c.idx[:0]
	c.shown = c.shown[:0]
	c.hdr = c.hdr[:0]
}

// Add appends a check and returns its index.
func (c *Call) Add(ch Check) int {
	c.note(&ch)
	c.Checks = append(c.Checks, ch)
	c.Results = append(c.Results, Result{})
	return len(c.Checks) - 1
}

// Record adds a check decided outside Decide, such as a rate decided with a
// concurrency slot in one step, so that the fields describe it with the
// others. It returns the check's index.
func (c *Call) Record(ch Check, r Result) int {
	c.note(&ch)
	c.Checks = append(c.Checks, ch)
	c.Results = append(c.Results, r)
	return len(c.Checks) - 1
}

// note records what ch needs of decide.
func (c *Call) note(ch *Check) {
	c.modes |= 1 << ch.Mode
	c.unbound = c.unbound || ch.Policy == nil
}

// has reports whether any check has mode m.
func (c *Call) has(m Mode) bool { return c.modes&(1<<m) != 0 }

// Described returns the indexes of the checks the last Fields described,
// in the order it described them.
func (c *Call) Described() []int { return c.shown }

// Decide decides the call's checks, as the package describes, and returns
// the request's verdict. With Options.StopOnError, a store error ends the
// decision and is returned; otherwise the error is only in the check's
// Result and Call.Failed is set.
//
// On a refused request, the checks that neither refused it nor failed are
// Skipped, but with Options.Report the Probe, ShadowProbe and Shadow
// checks, whose status is then told (Allowed or ShadowLimited).
func (e *Engine) Decide(ctx context.Context, c *Call) (v Verdict, err error) {
	if ctx2, end := e.traceDecision(ctx, c); end != nil {
		ctx = ctx2
		defer func() { end(v, err) }()
	}
	v, err = e.decide(ctx, c)
	switch {
	case err != nil:
		return v, err
	case v == Admitted && c.Failed && e.opts.FailClosed:
		return Unavailable, nil
	case v == Admitted:
		return v, nil
	}
	for i := range c.Checks {
		r := &c.Results[i]
		if r.Outcome != Allowed {
			continue
		}
		if m := c.Checks[i].Mode; !e.opts.Report || m == Enforce || m == Delay {
			r.Outcome = Skipped
		}
	}
	return v, nil
}

func (e *Engine) decide(ctx context.Context, c *Call) (Verdict, error) {
	v := Admitted
	never := false // a check that no request can pass
	// 1. The limits that admit nothing, and the probes.
	if c.unbound || c.has(Shadow) {
		for i := range c.Checks {
			ch, r := &c.Checks[i], &c.Results[i]
			switch {
			case ch.Policy == nil && (ch.Mode == Shadow || ch.Mode == ShadowProbe):
				r.Outcome, r.Never = ShadowLimited, true
			case ch.Policy == nil:
				r.Outcome, r.Never, v = Limited, true, Refused
			case ch.Mode == Shadow && ch.Policy.CheckCost(ch.Cost) != nil:
				// More than the limit could ever admit: over it, not an error.
				r.Outcome, r.Never = ShadowLimited, true
			}
			never = never || r.Never
		}
	}
	// The batch: one counter named twice is charged once, with both
	// costs; a cost beyond what its limit could ever admit is over it.
	c.reqs, c.idx = c.reqs[:0], c.idx[:0]
	for i := range c.Checks {
		ch := &c.Checks[i]
		if ch.Mode != Enforce || ch.Policy == nil || c.Results[i].Never {
			c.idx = append(c.idx, -1)
			continue
		}
		j := slices.IndexFunc(c.reqs, func(q sluice.Request) bool { return q.Key == ch.Key && sameState(q.Policy, ch.Policy) })
		if j < 0 {
			j = len(c.reqs)
			c.reqs = append(c.reqs, sluice.Request{Policy: ch.Policy, Key: ch.Key})
		}
		c.reqs[j].N += ch.Cost
		c.idx = append(c.idx, j)
	}
	for i, j := range c.idx {
		if j >= 0 && c.reqs[j].Policy.CheckCost(c.reqs[j].N) != nil {
			c.Results[i].Outcome, c.Results[i].Never, v = Limited, true, Refused
			never = true
		}
	}
	// The state of what never passes, uncharged, for its status.
	if never {
		for i := range c.Checks {
			ch, r := &c.Checks[i], &c.Results[i]
			if !r.Never || ch.Policy == nil {
				continue
			}
			sctx, sp := e.storeSpan(ctx, spanPeek, ch.Name)
			d, err := e.store.Peek(sctx, ch.Policy, ch.Key)
			end(sp, err)
			if err == nil && !d.Degraded {
				d.Allowed = false
				r.Decision = d
			}
		}
	}
	if c.has(Probe) {
		for i := range c.Checks {
			ch, r := &c.Checks[i], &c.Results[i]
			if ch.Mode != Probe || ch.Policy == nil || (v != Admitted && !e.opts.Report) {
				continue
			}
			d, err := e.look(ctx, ch)
			if err != nil {
				if err := e.fail(c, i, err); err != nil {
					return v, err
				}
				continue
			}
			r.Decision = d
			switch {
			case d.Allowed:
			case d.Degraded && e.failsClosed:
				r.Outcome, r.Err = Error, ErrFailedClosed
				if v == Admitted {
					v = Unavailable
				}
			default:
				r.Outcome, v = Limited, Refused
			}
		}
	}
	// 2. Reservations.
	if c.has(Delay) {
		for i := range c.Checks {
			ch, r := &c.Checks[i], &c.Results[i]
			if ch.Mode != Delay || ch.Policy == nil || v != Admitted {
				continue
			}
			if !ch.Policy.CanReserve() {
				if err := e.fail(c, i, fmt.Errorf("%w: policy %q", sluice.ErrReserveUnsupported, ch.Policy.Name())); err != nil {
					return v, err
				}
				continue
			}
			sctx, sp := e.storeSpan(ctx, spanReserve, ch.Name)
			d, err := e.store.Reserve(sctx, ch.Policy, ch.Key, ch.Cost, min(max(ch.MaxDelay, 0), sluice.MaxWait))
			end(sp, err)
			if err != nil {
				if err := e.fail(c, i, err); err != nil {
					return v, err
				}
				continue
			}
			r.Decision = d
			switch {
			case !d.Allowed && d.Degraded && e.failsClosed:
				r.Outcome, r.Err, v = Error, ErrFailedClosed, Unavailable
			case !d.Allowed:
				r.Outcome, v = Limited, Refused
			case d.Delay > 0:
				r.Outcome = Delayed
			}
		}
	}
	// 3. The batch.
	if len(c.reqs) > 0 && v == Admitted {
		if cap(c.outs) < len(c.reqs) {
			c.outs = make([]sluice.Decision, len(c.reqs))
		}
		c.outs = c.outs[:len(c.reqs)]
		clear(c.outs)
		sctx, sp := e.storeSpan(ctx, spanTakeAll, c.batchName())
		ok, err := sluice.TakeAll(sctx, e.store, c.reqs, c.outs)
		end(sp, err)
		switch {
		case err != nil && e.opts.StopOnError:
			return v, err
		case err != nil:
			for i, j := range c.idx {
				if j >= 0 {
					c.Results[i].Outcome, c.Results[i].Err = Error, err
				}
			}
			c.Failed = true
		case ok:
			for i, j := range c.idx {
				if j >= 0 {
					c.Results[i].Decision = c.outs[j]
				}
			}
		default:
			closed, denied := false, false
			for i, j := range c.idx {
				if j < 0 || c.Results[i].Never {
					continue
				}
				d, r := c.outs[j], &c.Results[i]
				r.Decision = d // admitted alone, or undecided (a zero Decision)
				switch {
				case !d.Allowed && d.Degraded && e.failsClosed:
					r.Outcome, r.Err, closed = Error, ErrFailedClosed, true
				case !d.Allowed && !d.Time.IsZero():
					r.Outcome, denied = Limited, true
				}
			}
			// Refused by a limit, unless every denial was the store
			// failing closed.
			if v = Refused; closed && !denied {
				v = Unavailable
			}
		}
	}
	if c.Failed && e.opts.FailClosed && v == Admitted {
		return v, nil // refused by Decide: no shadow is charged
	}
	// 4. What is decided after the others: the status of everything the
	// refusal left undecided (Options.Report), or the shadows of an
	// admitted request, charged.
	for i := range c.Checks {
		if v == Admitted && !c.has(Shadow) && !c.has(ShadowProbe) || v != Admitted && !e.opts.Report {
			break
		}
		ch, r := &c.Checks[i], &c.Results[i]
		if ch.Policy == nil || r.Never || r.Outcome == Error {
			continue
		}
		var (
			d   sluice.Decision
			err error
		)
		switch {
		case v == Admitted && ch.Mode == Shadow:
			sctx, sp := e.storeSpan(ctx, spanTake, ch.Name)
			d, err = e.store.Take(sctx, ch.Policy, ch.Key, ch.Cost)
			end(sp, err)
		case v == Admitted && ch.Mode == ShadowProbe,
			v != Admitted && e.opts.Report && ch.Mode != Delay && ch.Mode != Probe && r.Decision.Time.IsZero():
			d, err = e.look(ctx, ch)
		default:
			continue
		}
		if err != nil {
			if err := e.fail(c, i, err); err != nil {
				return v, err
			}
			continue
		}
		r.Decision = d
		switch {
		case d.Allowed:
		case d.Degraded && e.failsClosed:
			r.Outcome, r.Err = Error, ErrFailedClosed // not over: the store could not tell
		case ch.Mode == Shadow || ch.Mode == ShadowProbe:
			r.Outcome = ShadowLimited
		default:
			r.Outcome = Limited
		}
	}
	return v, nil
}

// sameState reports whether p and q keep the same state: the same policy,
// or two of the same name and length (a limit's identity is its policy's
// name and its index), such as a request's own limits built again.
func sameState(p, q *sluice.Policy) bool {
	return p == q || (p.Name() == q.Name() && p.Len() == q.Len())
}

// look returns ch's status without charging it: Allowed only if Cost units
// are left. A refused look of a penalized Probe counts a strike: the
// store takes one unit (a refusal charges nothing) and may block; should
// the take be admitted after all (a unit freed meanwhile), the check stays
// refused.
func (e *Engine) look(ctx context.Context, ch *Check) (sluice.Decision, error) {
	sctx, sp := e.storeSpan(ctx, spanPeek, ch.Name)
	d, err := e.store.Peek(sctx, ch.Policy, ch.Key)
	end(sp, err)
	if err != nil {
		return d, err
	}
	if d.Allowed && d.Remaining < ch.Cost {
		d.Allowed = false
	}
	if !d.Allowed && !d.Degraded && ch.Mode == Probe && storekit.Of(ch.Policy).Penalty() != nil {
		sctx, sp := e.storeSpan(ctx, spanTake, ch.Name)
		t, terr := e.store.Take(sctx, ch.Policy, ch.Key, 1)
		end(sp, terr)
		if terr == nil && !t.Allowed {
			d = t
		}
	}
	return d, nil
}

// fail records a store error on check i: with StopOnError it returns the
// error; otherwise the check is Error and the call Failed.
func (e *Engine) fail(c *Call, i int, err error) error {
	if e.opts.StopOnError {
		return err
	}
	c.Results[i].Outcome, c.Results[i].Err = Error, err
	c.Failed = true
	return nil
}

// Cancel gives back what a request that will not be served had reserved:
// the units of its Delay checks.
func (e *Engine) Cancel(ctx context.Context, c *Call) {
	for i := range c.Checks {
		ch, r := &c.Checks[i], &c.Results[i]
		if ch.Mode != Delay || !r.Decision.Allowed || ch.Policy == nil {
			continue
		}
		// The quota is lost at worst; the request is not served either way.
		sctx, sp := e.storeSpan(ctx, spanCancel, ch.Name)
		err := e.store.Cancel(sctx, ch.Policy, ch.Key, ch.Cost, r.Decision.Time.Add(r.Decision.Delay))
		end(sp, err)
		r.Decision.Allowed = false
	}
}

// batchName names the batch's first check, for its span.
func (c *Call) batchName() string {
	for i, j := range c.idx {
		if j >= 0 {
			return c.Checks[i].Name
		}
	}
	return ""
}

// MaxDelay returns the longest wait among the call's Delay checks.
func (c *Call) MaxDelay() time.Duration {
	var d time.Duration
	for i := range c.Checks {
		if c.Checks[i].Mode == Delay && c.Results[i].Decision.Allowed {
			d = max(d, c.Results[i].Decision.Delay)
		}
	}
	return d
}
