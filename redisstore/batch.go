package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/storekit"
)

var _ sluice.BatchTaker = (*Store)(nil)

// TakeAll implements sluice.BatchTaker: every limit of every request is
// evaluated and charged, or none is, in one call of the script, so one
// network round trip.
//
// The keys of different requests lie in different Redis Cluster slots, and
// no script may span slots, so on a Redis Cluster a batch of more than one
// request is not atomic: TakeAll peeks at every request at once and, only
// if every one would be admitted, charges them all at once, in two round
// trips however many requests there are. A request racing another between
// the two steps can then be charged to some of its limits and denied by
// another. A single server and a Sentinel-managed master decide every batch
// atomically.
//
// A request of cost 1 whose key Redis has just denied is answered from the
// local cache of denials (Options.DenyCache): the batch is then denied
// without calling Redis, and the other requests are left undecided, as zero
// Decisions.
//
// A batch with a policy that has a penalty (sluice.Penalty), or with a
// policy in lease or async mode (sluice.Policy.WithSync), whose leases and
// async views are spent locally, is not decided in one step, on any Redis:
// TakeAll returns sluice.ErrNotAtomic and sluice.TakeAll decides it
// request by request (checking every request, then taking them one after
// the other, or only the penalized requests that would be denied, so that
// their denials count as strikes).
//
// When Redis fails, the batch follows OnError: Local decides it atomically
// on the fallback store (when that store can), Allow admits it, Deny denies
// it; every Decision then has Degraded set.
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request, out []sluice.Decision) (bool, error) {
	var cs [8]*compiled
	comp := cs[:0]
	limits, script := 0, plainScript
	penalized, synced := false, false
	for _, r := range reqs {
		penalized = penalized || storekit.Of(r.Policy).Penalty() != nil
		c := s.compile(r.Policy)
		if c.err != nil {
			return false, c.err
		}
		synced = synced || quotaMode(r.Policy, c) != sluice.SyncExact
		comp = append(comp, c)
		limits += len(c.suffixes)
		if c.script == wideScript {
			script = wideScript
		}
	}
	clear(out[:len(reqs)])
	if synced || (penalized && len(reqs) > 1) {
		// Leases and async views are spent locally, outside any script,
		// and strikes are counted by each request's own call: such a
		// batch is decided request by request.
		return false, fmt.Errorf("redisstore: a batch with a penalty or a sync mode: %w", sluice.ErrNotAtomic)
	}
	if s.deny != nil {
		now := s.localNow()
		for i, r := range reqs {
			if r.N != 1 {
				continue
			}
			if d, ok := s.deny.get(s.deny.id(comp[i].slots, r.Key), now, 1); ok {
				out[i] = s.cached(d)
				return false, nil
			}
		}
	}
	if c := s.client(); len(reqs) > 1 && c != nil && c.Mode() == rueidis.ClientModeCluster {
		return s.checkThenCharge(ctx, reqs, comp, out)
	}
	var res []int64
	var err error
	for _, r := range reqs {
		if err = s.settled(ctx, r.Policy, r.Key); err != nil {
			break
		}
	}
	switch {
	case err != nil:
	case s.coalesces(script == plainScript):
		res, err = s.co.takeAll(ctx, s, reqs, comp, limits)
	default:
		res, err = s.batchCall(ctx, reqs, comp, limits, script)
	}
	if err != nil {
		return s.degradeAll(ctx, reqs, comp, out, err)
	}
	ok := decodeBatch(reqs, res, out)
	if s.deny != nil {
		for i, r := range reqs {
			s.remember(s.deny.id(comp[i].slots, r.Key), r.N, out[i])
		}
	}
	if ok {
		for _, r := range reqs {
			s.mirror(ctx, r.Policy, r.Key, r.N)
		}
	}
	return ok, nil
}

// decodeBatch fills out with the Decisions of a batch call's reply res and
// reports whether the batch was admitted. On a refused batch nothing was
// charged: an admitted member tells the units it has now, not those it
// would have had after the charge (see sluice.BatchTaker).
func decodeBatch(reqs []sluice.Request, res []int64, out []sluice.Decision) bool {
	ok, st := true, res[2:]
	for i, r := range reqs {
		k := 4 * r.Policy.Len()
		out[i] = decide(r.Policy, res[0], st[:k])
		st = st[k:]
		ok = ok && out[i].Allowed
	}
	if !ok {
		for i, r := range reqs {
			if out[i].Allowed {
				out[i].Remaining += r.N
			}
		}
	}
	return ok
}

// batchCall decides reqs, of limits limits in all, whole or not at all, in
// one call of script, and returns its reply.
func (s *Store) batchCall(ctx context.Context, reqs []sluice.Request, comp []*compiled, limits int, script *rueidis.Lua) ([]int64, error) {
	if !s.admit() {
		return nil, ErrCircuitOpen
	}
	keys, args := batchArgs("batch", s.scriptNow(), limits, 0)
	keys, args = s.appendLimits(keys, args, reqs, comp)
	return s.exec(ctx, script, "batch", keys, appendCosts(args, reqs, comp), nil, 2+4*limits)
}

// batchArgs returns room for the keys and the start of the ARGV of the
// script's op "batch" or "each" at now (see scriptNow), for limits limits
// in all; after appendLimits and appendCosts for every request, the caller
// may append more arguments, up to room.
func batchArgs(op, now string, limits, room int) (keys, args []string) {
	args = make([]string, 0, 5+8*limits+room)
	return make([]string, 0, 2*limits), append(args, op, "1", now, "0", strconv.Itoa(limits))
}

// appendLimits appends the keys and the arguments of every limit of reqs.
func (s *Store) appendLimits(keys, args []string, reqs []sluice.Request, comp []*compiled) ([]string, []string) {
	for i, r := range reqs {
		keys = s.appendKeys(keys, comp[i], r.Policy, r.Key)
		args = append(args, s.limitArgs(comp[i])...)
	}
	return keys, args
}

// appendCosts appends the cost of every limit of reqs, once all their
// limits' arguments are in args.
func appendCosts(args []string, reqs []sluice.Request, comp []*compiled) []string {
	for i, r := range reqs {
		n := "1"
		if r.N != 1 {
			n = strconv.FormatInt(r.N, 10)
		}
		for range comp[i].suffixes {
			args = append(args, n)
		}
	}
	return args
}

// degradeAll answers a batch per OnError after Redis failed with err. With
// Local, a batch that the fallback admits is recorded in the tab.
func (s *Store) degradeAll(ctx context.Context, reqs []sluice.Request, comp []*compiled, out []sluice.Decision, err error) (bool, error) {
	if cerr := callerDone(ctx); cerr != nil {
		return false, cerr
	}
	if s.onFailure != nil {
		s.onFailure(err)
	}
	if s.onError == Local {
		ok, lerr := sluice.TakeAll(ctx, s.fallback, reqs, out)
		for i, r := range reqs {
			out[i].Degraded = true
			if ok && lerr == nil {
				s.tab.record(r.Policy, comp[i], r.Key, r.N, s.tabTime(out[i]), out[i])
			}
		}
		return ok, lerr
	}
	for i, r := range reqs {
		out[i] = s.failed(r.Policy)
	}
	return s.onError == Allow, nil
}

// checkThenCharge decides a batch that no one script can: it peeks at every
// request at once and charges them all at once only if every one would be
// admitted. Each call follows OnError by itself when Redis fails. A peek
// that Redis denies is a denial of cost 1, and is remembered as one.
func (s *Store) checkThenCharge(ctx context.Context, reqs []sluice.Request, comp []*compiled, out []sluice.Decision) (bool, error) {
	ok, err := each(reqs, out, func(r sluice.Request) (sluice.Decision, error) {
		d, err := s.Peek(ctx, r.Policy, r.Key)
		if d.Allowed && d.Remaining < r.N {
			d.Allowed = false
		}
		return d, err
	})
	if err != nil || !ok {
		if s.deny != nil && err == nil {
			for i, r := range reqs {
				if d := out[i]; r.N == 1 && !d.Allowed && !d.Degraded {
					s.remember(s.deny.id(comp[i].slots, r.Key), 1, d)
				}
			}
		}
		return false, err
	}
	return each(reqs, out, func(r sluice.Request) (sluice.Decision, error) {
		return s.Take(ctx, r.Policy, r.Key, r.N)
	})
}

// each runs f for every request concurrently, so that the client sends the
// commands together, and reports whether every Decision admits.
func each(reqs []sluice.Request, out []sluice.Decision, f func(sluice.Request) (sluice.Decision, error)) (bool, error) {
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := 1; i < len(reqs); i++ {
		wg.Go(func() { out[i], errs[i] = f(reqs[i]) })
	}
	out[0], errs[0] = f(reqs[0])
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	ok := true
	for i := range reqs {
		ok = ok && out[i].Allowed
	}
	return ok, nil
}
