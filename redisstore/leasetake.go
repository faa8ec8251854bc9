package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

// leasetake.lua wraps each decision script, for sluice.LeaseTaker.
var leaseTakeScripts = map[*rueidis.Lua]*rueidis.Lua{
	plainScript:        rueidis.NewLuaScript(script("leasetake.lua", plainLua)),
	wideScript:         rueidis.NewLuaScript(script("leasetake.lua", wideLua)),
	penaltyPlainScript: rueidis.NewLuaScript(script("leasetake.lua", penaltyPlainLua)),
	penaltyWideScript:  rueidis.NewLuaScript(script("leasetake.lua", penaltyWideLua)),
}

var _ sluice.LeaseTaker = (*Store)(nil)

// AcquireTake implements sluice.LeaseTaker in one script call that runs the
// policy's decision and the lease's (leasetake.lua). On a Redis Cluster the
// policy and the concurrency limit must have the same name, so that their
// keys share a hash slot; otherwise it returns sluice.ErrNotAtomic. The
// call bypasses the cache of denials and forgets the key there. When Redis
// fails it answers per Options.OnError, as Take and Acquire do: Local
// decides both on the fallback store (atomically if that is a
// sluice.LeaseTaker, as the default memstore.Store is), Allow admits both
// with a lease held nowhere, Deny refuses both.
func (s *Store) AcquireTake(ctx context.Context, p *sluice.Policy, n int64, name, key, id string, limit int64, lease time.Duration) (sluice.Decision, sluice.LeaseStatus, error) {
	c := s.compile(p)
	if c.err != nil {
		return sluice.Decision{}, sluice.LeaseStatus{}, c.err
	}
	if name != p.Name() {
		if cl := s.client(); cl != nil && cl.Mode() == rueidis.ClientModeCluster {
			return sluice.Decision{}, sluice.LeaseStatus{}, fmt.Errorf("redisstore: policy %q and concurrency %q: %w", p.Name(), name, sluice.ErrNotAtomic)
		}
	}
	if s.deny != nil {
		s.deny.forget(s.deny.id(c.slots, key))
	}
	err := s.settled(ctx, p, key)
	var res []int64
	if err == nil {
		res, err = s.leaseTake(ctx, c, p, n, name, key, id, limit, lease)
	}
	if err != nil {
		return s.degradeLeaseTake(ctx, c, p, err, n, name, key, id, limit, lease)
	}
	k := len(res) - 4
	d := decision(p, res[:k])
	st := leaseStatus([]int64{res[0], res[k], res[k+1], res[k+2], res[k+3]})
	if d.Allowed {
		s.mirror(ctx, p, key, n)
	}
	return d, st, nil
}

func (s *Store) leaseTake(ctx context.Context, c *compiled, p *sluice.Policy, n int64, name, key, id string, limit int64, lease time.Duration) ([]int64, error) {
	if !s.admit() {
		return nil, ErrCircuitOpen
	}
	args := make([]string, 0, 5+len(c.args)+len(c.pen)+3)
	args = append(args, "take", strconv.FormatInt(n, 10), s.scriptNow(), "0", strconv.Itoa(len(c.suffixes)))
	args = append(args, c.args...)
	args = append(args, c.pen...)
	args = append(args, id, strconv.FormatInt(limit, 10), strconv.FormatInt(lease.Microseconds(), 10))
	keys := append(s.keys(c, p, key), s.leaseKey(name, key))
	var rb [14]int64
	return s.exec(ctx, leaseTakeScripts[c.script], "acquire-take", keys, args, rb[:0], 2+4*len(c.suffixes)+4)
}

// degradeLeaseTake answers an AcquireTake per OnError after Redis failed
// with err.
func (s *Store) degradeLeaseTake(ctx context.Context, c *compiled, p *sluice.Policy, err error, n int64, name, key, id string, limit int64, lease time.Duration) (sluice.Decision, sluice.LeaseStatus, error) {
	if cerr := callerDone(ctx); cerr != nil {
		return sluice.Decision{}, sluice.LeaseStatus{}, cerr
	}
	if s.onError != Local {
		if s.onFailure != nil {
			s.onFailure(err)
		}
		d := s.failed(p)
		st := sluice.LeaseStatus{Granted: d.Allowed, Time: d.Time, Degraded: true, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
		if st.Granted {
			st.Holder = nowhere{}
		}
		return d, st, nil
	}
	fb, ok := s.fallback.(sluice.LeaseStore)
	if !ok {
		return sluice.Decision{}, sluice.LeaseStatus{}, err
	}
	if s.onFailure != nil {
		s.onFailure(err)
	}
	var (
		d  sluice.Decision
		st sluice.LeaseStatus
	)
	if lt, ok := s.fallback.(sluice.LeaseTaker); ok {
		d, st, err = lt.AcquireTake(ctx, p, n, name, key, id, limit, lease)
	} else {
		// Rate first, then the slot; a refused slot leaves the charge.
		if d, err = s.fallback.Take(ctx, p, key, n); err == nil && d.Allowed {
			st, err = fb.Acquire(ctx, name, key, id, limit, lease)
		}
	}
	if err != nil {
		return sluice.Decision{}, sluice.LeaseStatus{}, err
	}
	d.Degraded, st.Degraded = true, true
	if st.Granted {
		st.Holder = fb
	}
	if d.Allowed {
		s.tab.record(p, c, key, n, s.tabTime(d), d)
	}
	return d, st, nil
}
