// Package storekit is for writers of stores: what an implementation of
// sluice.Store needs of a policy beyond what the library's users see, and
// the few helpers every store shares. Users of Sluice never need it.
//
// A store receives a *sluice.Policy with every call. Of gives its view of
// that policy: the compiled limits (package algo's Rule, whose pure
// functions do the arithmetic), the identities under which the limits'
// state is kept, process-wide numbers for those identities and for the
// limits' definitions (so that in-process stores can key state by small
// integers and carry a state written under an older definition, see
// DefRule), and the policy's penalty.
//
// The optional abilities a store may have are interfaces of package
// sluice, where the code that uses them lives: sluice.BatchTaker (a batch
// decided in one step, for sluice.TakeAll), sluice.LeaseStore,
// sluice.LeaseTaker and sluice.LeaseInspector (concurrency limits) and
// sluice.ClosedFailer (a store whose failure policy refuses requests).
// Implementations assert them with guards such as
//
//	var _ sluice.BatchTaker = (*Store)(nil)
//
// Package storetest is the conformance suite every store must pass.
package storekit

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/compiled"
)

// Policy is a store's view of a *sluice.Policy. It is a small value, cheap
// to get once per decision with Of, and safe for concurrent use; a store
// must not modify anything it returns.
type Policy struct {
	c *compiled.Policy
}

// Of returns the store's view of p.
func Of(p *sluice.Policy) Policy { return Policy{compiled.Of(p)} }

// Len returns the number of limits.
func (p Policy) Len() int { return len(p.c.Rules) }

// Rule returns the compiled form of limit i.
func (p Policy) Rule(i int) *algo.Rule { return &p.c.Rules[i] }

// ID returns the identity of limit i as a string, "<name>|<i>": the policy
// name and the index, which identify the limit's state across processes
// and across changes of its definition. Stores key state by the identity
// and record with it the definition that wrote it (memstore through Slot
// and Def; redisstore names its keys after the name and index and keeps
// the definition in the value).
func (p Policy) ID(i int) string { return p.c.IDs[i] }

// Slot returns a process-wide number for ID(i): equal identities (the
// same policy name and index) get equal numbers, whatever their
// definitions. In-process stores key state by it.
func (p Policy) Slot(i int) uint32 { return p.c.Slots[i] }

// MayLog reports whether limit i's identity (Slot) may have sliding_log
// state: whether some policy of the process has had a sliding_log limit
// under it. When it has not, an in-process store holds no sliding-log
// state for it and need not look for any to carry.
func (p Policy) MayLog(i int) bool { return compiled.MayLog(p.c.Slots[i]) }

// Def returns a process-wide number for the definition of limit i (its
// algorithm, Count, Period, Burst and calendar, as compiled): equal
// definitions get equal numbers, whatever the policies' names. It is never
// zero. In-process stores record it with a state and, when a decision
// finds a state recorded under another number, carry it from DefRule of
// that number to Rule(i).
func (p Policy) Def(i int) uint32 { return p.c.Defs[i] }

// Penalty returns the policy's penalty, or nil if it has none.
func (p Policy) Penalty() *sluice.Penalty {
	pen, _ := p.c.Penalty.(*sluice.Penalty)
	return pen
}

// PenaltySlot returns a process-wide number for the identity of the
// policy's penalty records (its name), as Slot does for limits; zero if
// the policy has no penalty.
func (p Policy) PenaltySlot() uint32 { return p.c.PenaltySlot }

// Decision converts the status of the binding limit, limit i, at time now
// (nanoseconds since the Unix epoch) into a sluice.Decision, whose Limit is
// the limit's Burst (its Count for a window): the ceiling of Remaining.
func (p Policy) Decision(i int, s algo.Status, now int64) sluice.Decision {
	return sluice.Decision{
		Allowed:    s.Allowed,
		Limit:      p.c.Rules[i].Burst(),
		Remaining:  s.Remaining,
		RetryAfter: time.Duration(s.RetryAfter),
		ResetAfter: time.Duration(s.ResetAfter),
		Index:      i,
		Time:       time.Unix(0, now),
	}
}

// Blocked returns the Decision that denies a request for a key blocked by
// the policy's penalty until retry from time now: RetryAfter and
// ResetAfter are retry, Remaining zero, and the binding limit is limit 0.
func (p Policy) Blocked(retry time.Duration, now int64) sluice.Decision {
	return sluice.Decision{
		Limit:      p.c.Rules[0].Burst(),
		RetryAfter: retry,
		ResetAfter: retry,
		Time:       time.Unix(0, now),
	}
}

// DefRule returns the compiled rule of the definition numbered def, as
// Policy.Def numbers them, or nil if no policy of the process has that
// number. In-process stores use it to carry state written under another
// definition. It is safe for concurrent use and does not lock.
func DefRule(def uint32) *algo.Rule { return compiled.DefRule(def) }
