package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

var _ sluice.LeaseStore = (*Store)(nil)

// leases are the concurrency leases of a store: per name and key, the
// expiry (store clock, ns) of every lease id held. A key whose leases have
// all expired or been released is dropped when next touched, and every key
// is checked once the map has doubled since the last such sweep, so memory
// stays within twice the keys that hold live leases. One mutex guards them:
// a lease is taken once per unit of work, not per request unit. A call costs
// time linear in the leases its key holds (it checks each for expiry), which
// suits limits up to some thousands per key.
type leases struct {
	mu    sync.Mutex
	keys  map[leaseKey]map[string]int64
	swept int // len(keys) after the last sweep
}

type leaseKey struct{ name, key string }

// live returns the leases of k after forgetting the expired ones, or nil
// if none is left (and then k is dropped).
func (ls *leases) live(k leaseKey, now int64) map[string]int64 {
	held := ls.keys[k]
	for id, exp := range held {
		if exp <= now {
			delete(held, id)
		}
	}
	if len(held) == 0 {
		delete(ls.keys, k)
		return nil
	}
	return held
}

func (ls *leases) sweep(now int64) {
	for k := range ls.keys {
		ls.live(k, now)
	}
	ls.swept = len(ls.keys)
}

func status(granted bool, held map[string]int64, now int64) sluice.LeaseStatus {
	st := sluice.LeaseStatus{Granted: granted, InUse: int64(len(held)), Time: time.Unix(0, now)}
	for _, exp := range held {
		st.ResetAfter = max(st.ResetAfter, time.Duration(exp-now))
	}
	return st
}

// Acquire implements sluice.LeaseStore on the store's clock.
func (s *Store) Acquire(_ context.Context, name, key, id string, limit int64, lease time.Duration) (sluice.LeaseStatus, error) {
	now := s.now()
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	k := leaseKey{name, key}
	held := ls.live(k, now)
	if int64(len(held)) >= limit {
		return refused(held, now), nil
	}
	return ls.add(k, held, id, now, lease), nil
}

// refused is the status of an Acquire refused with held leases, all live.
func refused(held map[string]int64, now int64) sluice.LeaseStatus {
	st := status(false, held, now)
	first := int64(-1)
	for _, exp := range held {
		if first < 0 || exp < first {
			first = exp
		}
	}
	st.RetryAfter = time.Duration(first - now)
	return st
}

// add adds lease id to k, whose live leases are held (nil for none), and
// returns the status of the grant. The caller holds ls.mu.
func (ls *leases) add(k leaseKey, held map[string]int64, id string, now int64, lease time.Duration) sluice.LeaseStatus {
	if held == nil {
		if ls.keys == nil {
			ls.keys = make(map[leaseKey]map[string]int64)
		}
		if len(ls.keys) >= 2*max(ls.swept, 512) {
			ls.sweep(now)
		}
		held = make(map[string]int64, 1)
		ls.keys[k] = held
	}
	held[id] = now + int64(lease)
	return status(true, held, now)
}

// Renew implements sluice.LeaseStore on the store's clock.
func (s *Store) Renew(_ context.Context, name, key, id string, lease time.Duration) (sluice.LeaseStatus, error) {
	now := s.now()
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	held := ls.live(leaseKey{name, key}, now)
	_, ok := held[id]
	if ok {
		held[id] = now + int64(lease)
	}
	return status(ok, held, now), nil
}

// Release implements sluice.LeaseStore on the store's clock.
func (s *Store) Release(_ context.Context, name, key, id string) (sluice.LeaseStatus, error) {
	now := s.now()
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	k := leaseKey{name, key}
	held := ls.live(k, now)
	_, ok := held[id]
	if ok {
		delete(held, id)
		if len(held) == 0 {
			delete(ls.keys, k)
		}
	}
	return status(ok, held, now), nil
}

// leaseKeys returns the number of keys holding lease state, for tests.
func (s *Store) leaseKeys() int {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	return len(s.leases.keys)
}

var _ sluice.LeaseTaker = (*Store)(nil)

// AcquireTake implements sluice.LeaseTaker: the leases' lock is held
// across the slot check, the policy's decision and the lease's addition,
// so no Acquire or AcquireTake of the store runs in between. (Takes of p
// that hold no lease may run in between; each is atomic on its own, so
// neither limit is ever exceeded.)
func (s *Store) AcquireTake(ctx context.Context, p *sluice.Policy, n int64, name, key, id string, limit int64, lease time.Duration) (sluice.Decision, sluice.LeaseStatus, error) {
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := s.now()
	k := leaseKey{name, key}
	held := ls.live(k, now)
	if int64(len(held)) >= limit {
		d, err := s.Peek(ctx, p, key)
		if err != nil {
			return sluice.Decision{}, sluice.LeaseStatus{}, err
		}
		return d, refused(held, now), nil
	}
	d, err := s.Take(ctx, p, key, n)
	if err != nil || !d.Allowed {
		return d, status(false, held, now), err
	}
	return d, ls.add(k, held, id, now, lease), nil
}

var _ sluice.LeaseInspector = (*Store)(nil)

// Leases implements sluice.LeaseInspector on the store's clock.
func (s *Store) Leases(_ context.Context, name, key string, limit int64) (sluice.LeaseStatus, error) {
	now := s.now()
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	held := ls.live(leaseKey{name, key}, now)
	if int64(len(held)) >= limit {
		return refused(held, now), nil
	}
	return status(false, held, now), nil
}

// ResetLeases implements sluice.LeaseInspector.
func (s *Store) ResetLeases(_ context.Context, name, key string) error {
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.keys, leaseKey{name, key})
	return nil
}
