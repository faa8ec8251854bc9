package sluice

import (
	"context"
	"errors"
	"fmt"
)

// Request is one member of a batch decided by TakeAll: a request of cost N
// for Key under Policy.
type Request struct {
	Policy *Policy
	Key    string
	N      int64
}

// batchTaker is implemented by stores that decide a batch atomically.
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
// A store that implements TakeAll(ctx, reqs, out) decides the batch
// atomically. For any other store TakeAll checks every request first (Peek)
// and charges none if any would be denied, then charges them in order; only
// a concurrent request slipping between the check and the charge can then
// deny a later request after earlier ones were charged, and those charges
// stay. len(out) must be at least len(reqs).
func TakeAll(ctx context.Context, store Store, reqs []Request, out []Decision) (bool, error) {
	if len(out) < len(reqs) {
		return false, fmt.Errorf("sluice: TakeAll: %d requests but room for %d decisions", len(reqs), len(out))
	}
	for _, r := range reqs {
		if r.Policy == nil {
			return false, errors.New("sluice: TakeAll: nil policy")
		}
		if err := r.Policy.CheckCost(r.N); err != nil {
			return false, err
		}
	}
	switch len(reqs) {
	case 0:
		return true, nil
	case 1:
		d, err := store.Take(ctx, reqs[0].Policy, reqs[0].Key, reqs[0].N)
		out[0] = d
		return err == nil && d.Allowed, err
	}
	if b, ok := store.(batchTaker); ok {
		return b.TakeAll(ctx, reqs, out)
	}
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
