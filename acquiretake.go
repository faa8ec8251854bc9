package sluice

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// LeaseTaker is a store that decides a rate policy and a concurrency lease
// in one atomic step, for Concurrency.AcquireTake. memstore.Store and
// redisstore.Store implement it. The arguments have been validated as for
// Store.Take and LeaseStore.Acquire.
type LeaseTaker interface {
	// AcquireTake, atomically: forgets the expired leases of key under
	// name; if fewer than limit remain, decides a request of cost n for
	// key under p as Take does and, only if p admits it, adds lease id
	// expiring lease from now. If no slot is free it charges nothing and
	// reports p's status as Peek does. The Decision is p's, the
	// LeaseStatus the leases' (Granted only if both admitted; when p
	// refused, RetryAfter is zero if a slot was free). A store that cannot
	// decide this pair in one step (their state lies apart) returns an
	// error wrapping ErrNotAtomic, having done nothing.
	AcquireTake(ctx context.Context, p *Policy, n int64, name, key, id string, limit int64, lease time.Duration) (Decision, LeaseStatus, error)
}

// ErrNotAtomic is returned by a store that cannot decide in one step what
// it was asked to: a LeaseTaker for a policy and a concurrency limit (then
// Concurrency.AcquireTake takes them one after the other), a BatchTaker for
// a batch (then TakeAll decides it request by request).
var ErrNotAtomic = errors.New("sluice: cannot be decided in one step")

// Admission is the answer of Concurrency.AcquireTake.
type Admission struct {
	// Rate is the rate policy's decision. It is charged only if the
	// request was admitted; when no slot was free it is the policy's
	// status as Peek reports it, charged nothing.
	Rate Decision
	// Slot is the concurrency limit's decision: Allowed only if a lease
	// was taken. When the rate policy refused the request, no slot was
	// taken and Remaining counts the free slots (RetryAfter is zero if one
	// was free).
	Slot Decision
}

// Allowed reports whether both limits admitted the request.
func (a Admission) Allowed() bool { return a.Rate.Allowed && a.Slot.Allowed }

// AcquireTake admits a request of cost n for key only if both lim's rate
// policy and c admit it: the rate policy is charged only if a slot is
// free, and a slot is taken only if the rate policy admits the request.
// The returned Lease, not nil only when the Admission is Allowed, holds the
// slot until Release, as with Acquire.
//
// When lim and c share one store that implements LeaseTaker, the decision
// is one atomic step (one script call on Redis, which on a Redis Cluster
// needs the policy and c to have the same name, so that their state shares
// a hash slot). Otherwise, or when the store answers ErrNotAtomic, the rate
// policy decides first and the slot is acquired after: a refused slot
// gives the rate charge back with Limiter.Refund when the policy's limits
// are all buckets, and Rate is then a Peek after the refund (window limits
// keep the charge, and Rate is the charged decision), and when the rate policy
// refuses, Slot is a Decision with only Limit set (the slots were not
// asked). An error means no decision could be made; nothing is held or
// charged then, except a window limit's charge in the fallback when the
// slot's store failed.
func (c *Concurrency) AcquireTake(ctx context.Context, lim *Limiter, key string, n int64) (*Lease, Admission, error) {
	if err := lim.policy.CheckCost(n); err != nil {
		return nil, Admission{}, err
	}
	id, err := newLeaseID()
	if err != nil {
		return nil, Admission{}, err
	}
	if lt, ok := lim.store.(LeaseTaker); ok && sameStore(lim.store, c.store) {
		d, st, err := lt.AcquireTake(ctx, lim.policy, n, c.name, key, id, c.limit, c.lease)
		switch {
		case err == nil:
			a := Admission{Rate: d, Slot: c.decision(st)}
			if !st.Granted {
				return nil, a, nil
			}
			return c.newLease(key, id, st), a, nil
		case !errors.Is(err, ErrNotAtomic):
			return nil, Admission{}, err
		}
	}
	d, err := lim.AllowN(ctx, key, n)
	if err != nil {
		return nil, Admission{}, err
	}
	if !d.Allowed {
		return nil, Admission{Rate: d, Slot: Decision{Limit: c.limit}}, nil
	}
	st, err := c.store.Acquire(ctx, c.name, key, id, c.limit, c.lease)
	if err != nil || !st.Granted {
		if lim.policy.CanReserve() {
			if rerr := lim.Refund(ctx, key, n); rerr != nil && err == nil {
				err = fmt.Errorf("sluice: refund after a refused slot: %w", rerr)
			}
		}
		if err != nil {
			return nil, Admission{}, err
		}
		if lim.policy.CanReserve() {
			// Report the refunded state, as the atomic path's peek does.
			if pd, perr := lim.Peek(ctx, key); perr == nil {
				d = pd
			}
		}
		return nil, Admission{Rate: d, Slot: c.decision(st)}, nil
	}
	return c.newLease(key, id, st), Admission{Rate: d, Slot: c.decision(st)}, nil
}

// sameStore reports whether a and b are one store.
func sameStore(a Store, b LeaseStore) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && any(a) == any(b)
}

// WaitTake is AcquireTake that waits, while the context allows and no
// longer than maxWait, for both limits to admit the request. It polls:
// after a refusal it waits until the refusing limit would admit the
// request (the rate's RetryAfter, or the earliest lease's expiry), but at
// most poll (default 50ms when poll <= 0), since a release frees a slot
// sooner; a rate refusal whose RetryAfter exceeds the time left ends the
// wait at once. maxWait and poll run on the real clock. It returns the
// last Admission; the Lease is nil unless it is Allowed, and an error if
// the store failed or ctx ended.
func (c *Concurrency) WaitTake(ctx context.Context, lim *Limiter, key string, n int64, maxWait, poll time.Duration) (*Lease, Admission, error) {
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	deadline := time.Now().Add(maxWait)
	for {
		l, a, err := c.AcquireTake(ctx, lim, key, n)
		if err != nil || a.Allowed() {
			return l, a, err
		}
		left := time.Until(deadline)
		wait := max(min(a.Slot.RetryAfter, poll), time.Millisecond)
		if !a.Rate.Allowed {
			wait = max(a.Rate.RetryAfter, time.Microsecond)
			if wait > left {
				return nil, a, nil
			}
		}
		if left <= 0 {
			return nil, a, nil
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, a, ctx.Err()
		case <-t.C:
		}
	}
}
