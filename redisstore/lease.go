package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

//go:embed lease.lua
var leaseLua string

var leaseScript = rueidis.NewLuaScript(leaseLua)

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
// Leases are not kept by the OnError fallback: when Redis fails, Acquire,
// Renew and Release return the error and the caller decides whether to run
// the work without a slot. An open circuit breaker fails them at once with
// ErrCircuitOpen.
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
	return sluice.LeaseStatus{
		Granted:    res[1] == 1,
		InUse:      res[2],
		RetryAfter: time.Duration(res[3]) * time.Microsecond,
		ResetAfter: time.Duration(res[4]) * time.Microsecond,
		Time:       time.UnixMicro(res[0]),
	}, nil
}

// Acquire implements sluice.LeaseStore in one script call. The lease
// timeout is rounded down to the microsecond.
func (s *Store) Acquire(ctx context.Context, name, key, id string, limit int64, lease time.Duration) (sluice.LeaseStatus, error) {
	return s.lease(ctx, "acquire", name, key, id, limit, lease)
}

// Renew implements sluice.LeaseStore in one script call.
func (s *Store) Renew(ctx context.Context, name, key, id string, lease time.Duration) (sluice.LeaseStatus, error) {
	return s.lease(ctx, "renew", name, key, id, 0, lease)
}

// Release implements sluice.LeaseStore in one script call.
func (s *Store) Release(ctx context.Context, name, key, id string) (sluice.LeaseStatus, error) {
	return s.lease(ctx, "release", name, key, id, 0, 0)
}
