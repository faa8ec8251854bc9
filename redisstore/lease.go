package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

var (
	leaseLua    = script("lease.lua", "")
	leaseScript = rueidis.NewLuaScript(leaseLua)
)

var _ sluice.LeaseStore = (*Store)(nil)

// The leases of a sluice.Concurrency named N for key K live in one sorted
// set at
//
//	<prefix>:{<length of N>:<N>:<K>}:c
//
// (K hashed with Options.HashKeys), member the lease id and score its
// expiry in µs, with a TTL of the time until its last lease expires. The
// hash tag is a policy's of the same name and key, so a later script can
// decide both at once. Every call is one script call (lease.lua) that first
// drops the expired leases; time is the server's TIME, or Options.Clock's.
//
// When Redis fails (or the circuit breaker is open), leases follow
// Options.OnError, and the LeaseStatus has Degraded set: Local acquires
// the lease in the fallback store (which must be a sluice.LeaseStore, as
// the default memstore.Store is; otherwise the error is returned), Allow
// grants a lease held nowhere, whose Renew and Release do nothing, and Deny
// refuses it, with RetryAfter the time until Redis is next tried. A lease
// acquired in the fallback store is renewed and released there (see
// sluice.LeaseStatus.Holder); one acquired in Redis is renewed and
// released in Redis only: while Redis fails, Renew and Release of such a
// lease return the error, and it expires by itself.
func (s *Store) leaseKey(name, key string) string {
	var b strings.Builder
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(strconv.Itoa(len(name)))
	b.WriteByte(':')
	b.WriteString(name)
	b.WriteByte(':')
	if s.hash != nil {
		var hb [digestLen]byte
		b.Write(s.hash.digest(hb[:0], key))
	} else {
		b.WriteString(key)
	}
	b.WriteString("}:c")
	return b.String()
}

func (s *Store) lease(ctx context.Context, op, name, key, id string, limit int64, lease time.Duration) (sluice.LeaseStatus, error) {
	if !s.admit() {
		return sluice.LeaseStatus{}, fmt.Errorf("redisstore: %s: %w", op, ErrCircuitOpen)
	}
	args := []string{op, id, s.scriptNow(), strconv.FormatInt(limit, 10), strconv.FormatInt(lease.Microseconds(), 10)}
	var buf [5]int64
	res, err := s.exec(ctx, leaseScript, op, []string{s.leaseKey(name, key)}, args, buf[:0], 5)
	if err != nil {
		return sluice.LeaseStatus{}, err
	}
	return leaseStatus(res), nil
}

// leaseStatus reads lease.lua's reply: the time, then granted, leases
// held, retry and reset in µs.
func leaseStatus(res []int64) sluice.LeaseStatus {
	return sluice.LeaseStatus{
		Granted:    res[1] == 1,
		InUse:      res[2],
		RetryAfter: time.Duration(res[3]) * time.Microsecond,
		ResetAfter: time.Duration(res[4]) * time.Microsecond,
		Time:       time.UnixMicro(res[0]),
	}
}

// degradeLease answers an Acquire per OnError after Redis failed with err.
// local acquires in the fallback store.
func (s *Store) degradeLease(ctx context.Context, err error, local func(sluice.LeaseStore) (sluice.LeaseStatus, error)) (sluice.LeaseStatus, error) {
	if cerr := callerDone(ctx); cerr != nil {
		return sluice.LeaseStatus{}, cerr
	}
	fb, ok := s.fallback.(sluice.LeaseStore)
	if s.onError == Local && !ok {
		return sluice.LeaseStatus{}, err
	}
	if s.onFailure != nil {
		s.onFailure(err)
	}
	now := time.Now()
	switch s.onError {
	case Allow:
		return sluice.LeaseStatus{Granted: true, Time: now, Degraded: true, Holder: nowhere{}}, nil
	case Deny:
		retry := s.failedRetry(now)
		return sluice.LeaseStatus{Time: now, RetryAfter: retry, ResetAfter: retry, Degraded: true}, nil
	}
	st, lerr := local(fb)
	if lerr != nil {
		return sluice.LeaseStatus{}, lerr
	}
	st.Degraded = true
	if st.Granted {
		st.Holder = fb
	}
	return st, nil
}

// nowhere holds the leases granted by OnError Allow: none.
type nowhere struct{}

func (nowhere) Acquire(context.Context, string, string, string, int64, time.Duration) (sluice.LeaseStatus, error) {
	return sluice.LeaseStatus{Granted: true, Time: time.Now(), Degraded: true}, nil
}

func (nowhere) Renew(context.Context, string, string, string, time.Duration) (sluice.LeaseStatus, error) {
	return sluice.LeaseStatus{Granted: true, Time: time.Now(), Degraded: true}, nil
}

func (nowhere) Release(context.Context, string, string, string) (sluice.LeaseStatus, error) {
	return sluice.LeaseStatus{Granted: true, Time: time.Now(), Degraded: true}, nil
}

// Acquire implements sluice.LeaseStore in one script call. The lease
// timeout is rounded down to the microsecond.
func (s *Store) Acquire(ctx context.Context, name, key, id string, limit int64, lease time.Duration) (sluice.LeaseStatus, error) {
	st, err := s.lease(ctx, "acquire", name, key, id, limit, lease)
	if err != nil {
		return s.degradeLease(ctx, err, func(f sluice.LeaseStore) (sluice.LeaseStatus, error) {
			return f.Acquire(ctx, name, key, id, limit, lease)
		})
	}
	return st, nil
}

// Renew implements sluice.LeaseStore in one script call.
func (s *Store) Renew(ctx context.Context, name, key, id string, lease time.Duration) (sluice.LeaseStatus, error) {
	return s.lease(ctx, "renew", name, key, id, 0, lease)
}

// Release implements sluice.LeaseStore in one script call.
func (s *Store) Release(ctx context.Context, name, key, id string) (sluice.LeaseStatus, error) {
	return s.lease(ctx, "release", name, key, id, 0, 0)
}

var _ sluice.LeaseInspector = (*Store)(nil)

// Leases implements sluice.LeaseInspector in one script call. It does not
// follow OnError: when Redis fails it returns the error.
func (s *Store) Leases(ctx context.Context, name, key string, limit int64) (sluice.LeaseStatus, error) {
	return s.lease(ctx, "peek", name, key, "", limit, 0)
}

// ResetLeases implements sluice.LeaseInspector in one script call. It also
// drops the key's leases in the fallback store, if that keeps them.
func (s *Store) ResetLeases(ctx context.Context, name, key string) error {
	if li, ok := s.fallback.(sluice.LeaseInspector); ok {
		if err := li.ResetLeases(ctx, name, key); err != nil {
			return err
		}
	}
	_, err := s.lease(ctx, "reset", name, key, "", 0, 0)
	return err
}
