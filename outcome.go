package sluice

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Counting by outcome: a limit that should count only some requests (failed
// logins, say) whose outcome is known only after they have been served has
// two exact ways to do it.
//
// Check, then charge: Peek before serving (a key whose Peek is not Allowed
// is over the limit and is refused), and AllowN after serving a request
// that should count. Concurrent requests in flight for one key can then
// exceed the limit by at most the number in flight at once: each passed
// Peek before any was charged.
//
// Reserve, then settle: AllowN before serving (the check and the charge are
// one atomic decision, so the limit is never exceeded), and Refund after
// serving a request that should not count. Refund needs bucket limits.

// Refund gives n units back to key, as if a request of cost n that was
// admitted had never been charged: for a request admitted by AllowN whose
// outcome says it should not count. The refund is applied now: each
// limit's debt shrinks by n units, never below zero, so that refunding a
// charge is exact whenever the charge was made (a bucket that has since
// drained ends as empty as if it had never been charged). Every limit must
// be a TokenBucket or GCRA limit (ErrReserveUnsupported otherwise): a
// window's count cannot be refunded exactly once the window has moved on.
// Refunding more than was charged gives the key a full quota, no more.
func (l *Limiter) Refund(ctx context.Context, key string, n int64) error {
	if !l.policy.CanReserve() {
		return fmt.Errorf("%w: refund on policy %q", ErrReserveUnsupported, l.policy.name)
	}
	if err := l.policy.CheckCost(n); err != nil {
		return err
	}
	// A store's Cancel gives back n units, as of its clock's now, of a
	// reservation that is not yet due; a reservation due at the end of
	// time never is.
	return l.store.Cancel(ctx, l.policy, key, n, endOfTime)
}

// endOfTime is the latest time a Cancel's due time can name.
var endOfTime = time.Unix(0, math.MaxInt64)
