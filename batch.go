package sluice

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Request is one member of a batch decided by TakeAll: a request of cost N
// for Key under Policy.
type Request struct {
	Policy *Policy
	Key    string
	N      int64
}

// BatchTaker is a store that decides a batch of requests in one step, for
// TakeAll. memstore.Store and redisstore.Store implement it. TakeAll has
// validated the batch (no request without a policy, every cost one its
// policy can admit, no two requests sharing a limit's state) and calls it
// for batches of two requests or more.
type BatchTaker interface {
	// TakeAll decides every request of reqs, atomically: if every limit of
	// every request admits it, it charges them all, sets out[i] to
	// request i's Decision after the charge and returns true; otherwise it
	// charges nothing and returns false, and out[i] tells what request i
	// alone would get now: Allowed if it would be admitted, with Remaining
	// counting the units left before any charge, and, if denied, the
	// RetryAfter a Take would report. A penalized request's denial counts
	// as a strike, as for Take. The store may deny the batch on a denial
	// it already knows of (a cache of recent denials) without deciding the
	// other requests: their out[i] are then zero Decisions (Time is zero).
	// A store that cannot decide this batch in one step returns an error
	// wrapping ErrNotAtomic, having done nothing; TakeAll then decides it
	// request by request.
	TakeAll(ctx context.Context, reqs []Request, out []Decision) (bool, error)
}

// TakeAll decides several requests together, such as the rules an HTTP
// request matches (per IP, per API key, global): if every limit of every
// request admits it, every request is charged, out[i] holds request i's
// Decision and TakeAll returns true. Otherwise it returns false and charges
// nothing; out[i] then tells whether request i alone would have been
// admitted (with Remaining counting the units it has now), and the denied
// ones carry RetryAfter as from Store.Take. The result means the same on
// every store.
//
// A store may deny the batch on a denial it already knows of (a cache of
// recent denials) without deciding the other requests: their out[i] are
// then zero Decisions (Time is zero).
//
// A store that implements BatchTaker decides a batch of more than one
// request in one step: atomically, unless its documentation says otherwise
// (as the Redis store's does for a Redis Cluster). For any other store, or
// when the store answers ErrNotAtomic, TakeAll checks every request first
// (Peek) and charges none if any would be denied, then charges them in
// order; only a concurrent request slipping between the check and the
// charge can then deny a later request after earlier ones were charged,
// and those charges stay. When the check finds a request denied, TakeAll
// still takes the denied requests whose policies have a Penalty, so that
// their denials count as strikes (a request admitted meanwhile is then
// charged).
//
// It returns an error wrapping ErrInvalidBatch when out has room for fewer
// decisions than reqs has requests, a request has no policy, or two
// requests are for the same key under policies that share the state of a
// limit (the same name, so equal identities, whatever their definitions),
// so that one batch would count the key twice; and ErrCostExceedsCapacity
// for a cost a request's policy could never admit.
func TakeAll(ctx context.Context, store Store, reqs []Request, out []Decision) (bool, error) {
	if err := checkBatch(reqs, out); err != nil {
		return false, err
	}
	switch len(reqs) {
	case 0:
		return true, nil
	case 1:
		d, err := store.Take(ctx, reqs[0].Policy, reqs[0].Key, reqs[0].N)
		out[0] = d
		return err == nil && d.Allowed, err
	}
	if b, ok := store.(BatchTaker); ok {
		ok, err := b.TakeAll(ctx, reqs, out)
		if !errors.Is(err, ErrNotAtomic) {
			return ok, err
		}
	}
	return takeEach(ctx, store, reqs, out)
}

// takeEach decides a batch request by request, as TakeAll describes for a
// store without a batch decision of its own.
func takeEach(ctx context.Context, store Store, reqs []Request, out []Decision) (bool, error) {
	ok := true
	for i, r := range reqs {
		d, err := store.Peek(ctx, r.Policy, r.Key)
		if err != nil {
			return false, err
		}
		if d.Allowed && d.Remaining < r.N {
			d.Allowed = false
		}
		out[i] = d
		ok = ok && d.Allowed
	}
	if !ok {
		// A penalized request's denial is a strike: Take counts it
		// (and, denied, charges nothing).
		for i, r := range reqs {
			if r.Policy.penalty == nil || out[i].Allowed {
				continue
			}
			d, err := store.Take(ctx, r.Policy, r.Key, r.N)
			if err != nil {
				return false, err
			}
			out[i] = d
		}
		return false, nil
	}
	for i, r := range reqs {
		d, err := store.Take(ctx, r.Policy, r.Key, r.N)
		if err != nil {
			return false, err
		}
		out[i] = d
		if !d.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// checkBatch returns an error if TakeAll cannot decide reqs into out.
func checkBatch(reqs []Request, out []Decision) error {
	if len(out) < len(reqs) {
		return fmt.Errorf("%w: %d requests but room for %d decisions", ErrInvalidBatch, len(reqs), len(out))
	}
	for i, r := range reqs {
		if r.Policy == nil {
			return fmt.Errorf("%w: request %d has no policy", ErrInvalidBatch, i)
		}
		if err := r.Policy.CheckCost(r.N); err != nil {
			return err
		}
		for _, q := range reqs[:i] {
			if q.Key != r.Key || q.Policy.name != r.Policy.name {
				continue
			}
			for _, a := range q.Policy.c.Slots {
				if slices.Contains(r.Policy.c.Slots, a) {
					return fmt.Errorf("%w: requests for key %q under policy %q share a limit", ErrInvalidBatch, r.Key, r.Policy.name)
				}
			}
		}
	}
	return nil
}
