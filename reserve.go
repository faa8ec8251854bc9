package sluice

import (
	"context"
	"fmt"
	"time"
)

// MaxWait bounds the maxWait of Reserve and Wait: a request is never
// scheduled further ahead than this.
const MaxWait = 24 * time.Hour

// Reservation is a request scheduled by Limiter.Reserve: the leaky bucket as
// a queue. If Allowed, the caller may act after Delay; if it will not act, it
// should Cancel to give the quota back.
type Reservation struct {
	Decision
	lim *Limiter
	key string
	n   int64
}

// Cancel gives the reservation's quota back if its time has not yet come.
// Cancelling a denied or already cancelled reservation does nothing.
func (r *Reservation) Cancel(ctx context.Context) error {
	if !r.Allowed || r.lim == nil {
		return nil
	}
	lim := r.lim
	r.lim = nil
	return lim.store.Cancel(ctx, lim.policy, r.key, r.n, r.Time.Add(r.Delay))
}

// Reserve schedules a request of cost n for key at the earliest time every
// limit admits it. When that is at most maxWait away, the request is charged
// as of that time and the Reservation is Allowed with the Delay to wait;
// otherwise nothing is charged, Allowed is false and RetryAfter says when the
// request would have fitted. maxWait is capped at MaxWait. The policy must
// hold only TokenBucket and GCRA limits (ErrReserveUnsupported otherwise).
func (l *Limiter) Reserve(ctx context.Context, key string, n int64, maxWait time.Duration) (Reservation, error) {
	if !l.policy.CanReserve() {
		return Reservation{}, fmt.Errorf("%w: policy %q", ErrReserveUnsupported, l.policy.name)
	}
	if err := l.policy.CheckCost(n); err != nil {
		return Reservation{}, err
	}
	maxWait = min(max(maxWait, 0), MaxWait)
	d, err := l.store.Reserve(ctx, l.policy, key, n, maxWait)
	if err != nil {
		return Reservation{}, err
	}
	return Reservation{Decision: d, lim: l, key: key, n: n}, nil
}

// Wait blocks until a request of cost n for key may proceed, for at most
// maxWait and never past ctx's deadline. It returns an allowed Decision once
// the request's turn has come; a denied Decision, at once and without
// charging anything, if the turn is further away than that; and ctx's error,
// with the reservation cancelled, if ctx ends while waiting.
func (l *Limiter) Wait(ctx context.Context, key string, n int64, maxWait time.Duration) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(deadline))
	}
	r, err := l.Reserve(ctx, key, n, maxWait)
	if err != nil || !r.Allowed || r.Delay <= 0 {
		return r.Decision, err
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r.Decision, nil
	case <-ctx.Done():
		// The caller gave up: give the slot back. The cancellation must
		// reach the store even though ctx is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if cerr := r.Cancel(cctx); cerr != nil {
			return Decision{}, fmt.Errorf("%w (and cancelling the reservation failed: %v)", ctx.Err(), cerr)
		}
		return Decision{}, ctx.Err()
	}
}
