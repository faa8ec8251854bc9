package sluice

import (
	"context"
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

// batchTaker is implemented by stores that decide a batch themselves. Such a
// store validates the batch with CheckBatch, so TakeAll leaves it that work.
type batchTaker interface {
	TakeAll(ctx context.Context, reqs []Request, out []Decision) (bool, error)
}

// TakeAll decides several requests together, such as the rules an HTTP
// request matches (per IP, per API key, global): if every limit of every
// request admits it, every request is charged, out[i] holds request i's
// Decision and TakeAll returns true. Otherwise it returns false and charges
// nothing; out[i] then tells whether request i alone would have been
// admitted, and the denied ones carry RetryAfter as from Store.Take.
//
// A store may deny the batch on a denial it already knows of (a cache of
// recent denials) without deciding the other requests: their out[i] are
// then zero Decisions (Time is zero).
//
// A store that implements TakeAll(ctx, reqs, out) decides a batch of more
// than one request itself, validating it with CheckBatch: atomically, unless
// its documentation says otherwise (as the Redis store's does for a Redis
// Cluster). For any other store TakeAll checks
// every request first (Peek) and charges none if any
// would be denied, then charges them in order; only a concurrent request
// slipping between the check and the charge can then deny a later request
// after earlier ones were charged, and those charges stay. When the check
// finds a request denied, TakeAll still takes the denied requests whose
// policies have a Penalty, so that their denials count as strikes (a
// request admitted meanwhile is then charged). len(out) must be
// at least len(reqs), or TakeAll returns ErrInvalidBatch.
func TakeAll(ctx context.Context, store Store, reqs []Request, out []Decision) (bool, error) {
	if b, ok := store.(batchTaker); ok && len(reqs) > 1 {
		return b.TakeAll(ctx, reqs, out) // it checks the batch itself
	}
	if err := CheckBatch(reqs, out); err != nil {
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
	return TakeEach(ctx, store, reqs, out)
}

// TakeEach decides a batch request by request, as TakeAll does for a store
// without a batch decision of its own: it checks every request (Peek) and
// charges none if any would be denied, except that the denied requests
// whose policies have a Penalty are taken so that their denials count as
// strikes; otherwise it charges them in order, and stops at a request that
// a concurrent one slipping between the check and the charge has made
// denied. It does not validate the batch: the caller has, with CheckBatch.
// Stores use it for batches they cannot decide atomically.
func TakeEach(ctx context.Context, store Store, reqs []Request, out []Decision) (bool, error) {
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

// CheckBatch returns an error if TakeAll cannot decide reqs into out: out
// has room for fewer decisions than reqs has requests (ErrInvalidBatch), a
// request has no policy (ErrInvalidBatch) or a cost its policy can never
// admit, or two requests are for the same key under policies that share the
// state of a limit (the same name, so equal identities, whatever their
// definitions; ErrInvalidBatch), so that one batch would count the key
// twice. Stores that implement TakeAll call it.
func CheckBatch(reqs []Request, out []Decision) error {
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
			for _, a := range q.Policy.slots {
				if slices.Contains(r.Policy.slots, a) {
					return fmt.Errorf("%w: requests for key %q under policy %q share a limit", ErrInvalidBatch, r.Key, r.Policy.name)
				}
			}
		}
	}
	return nil
}
