package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Bounds of a concurrency limit.
const (
	// MaxConcurrency is the largest limit of a Concurrency.
	MaxConcurrency = 1_000_000
	// MinLease and MaxLease bound the lease timeout of a Concurrency.
	MinLease = time.Millisecond
	MaxLease = 24 * time.Hour
)

// ErrInvalidConcurrency reports a concurrency limit that can never work: an
// empty or overlong name, a limit outside 1 to MaxConcurrency, or a lease
// timeout outside MinLease to MaxLease. Match it with errors.Is.
var ErrInvalidConcurrency = errors.New("sluice: invalid concurrency limit")

// LeaseStore holds the leases of concurrency limits: at most limit
// unexpired leases per name and key, shared by every process that uses the
// same backend. memstore.Store and redisstore.Store implement it. Every
// method is safe for concurrent use; the arguments have been validated by
// the caller (name and key as for policies, limit in 1 to MaxConcurrency,
// lease in MinLease to MaxLease, id a fresh random string).
//
// A lease expires by itself lease after it was acquired or last renewed, on
// the store's clock, so that a holder that dies never leaks its slot.
type LeaseStore interface {
	// Acquire forgets the expired leases of key under name and then, if
	// fewer than limit remain, adds a lease with the given id expiring
	// lease from now. It reports the leases held after the call.
	Acquire(ctx context.Context, name, key, id string, limit int64, lease time.Duration) (LeaseStatus, error)
	// Renew pushes the expiry of lease id to lease from now, if it is
	// still held; Granted reports whether it was.
	Renew(ctx context.Context, name, key, id string, lease time.Duration) (LeaseStatus, error)
	// Release removes lease id, if it is still held; Granted reports
	// whether it was. Releasing an unknown or expired id does nothing.
	Release(ctx context.Context, name, key, id string) (LeaseStatus, error)
}

// LeaseStatus is a LeaseStore's answer.
type LeaseStatus struct {
	// Granted reports, for Acquire, that the lease was added; for Renew
	// and Release, that the lease was held.
	Granted bool
	// InUse is the number of unexpired leases of the key after the call.
	InUse int64
	// RetryAfter is, when Acquire was refused, how long until the earliest
	// lease expires by itself (a release may free a slot sooner).
	RetryAfter time.Duration
	// ResetAfter is how long until the last lease held expires by itself;
	// zero when none is held.
	ResetAfter time.Duration
	// Time is the store's time of the call.
	Time time.Time
	// Degraded reports an answer from a store's failure path (its backend
	// could not be asked): a lease granted there may be held only locally,
	// or nowhere, and a refusal may mean the store fails closed rather than
	// that no slot is free.
	Degraded bool
	// Holder is, for a granted lease, the store that holds it when that is
	// not the store asked (a fallback store, say): the lease's Renew and
	// Release go there. Nil means the store asked.
	Holder LeaseStore
}

// Concurrency limits how many units of work run at once per key (5 exports
// per user, 100 requests in flight on a backend), across every process that
// shares its LeaseStore. A unit of work holds a Lease from Acquire until it
// calls Release; a lease that is neither released nor renewed expires by
// itself after the lease timeout, so a holder that crashes gives its slot
// back within that time and never leaks capacity. Choose the timeout longer
// than the work normally takes, or Renew the lease while the work runs.
//
// A Concurrency is immutable and safe for concurrent use. Two with the same
// name share their leases; give different limits different names.
type Concurrency struct {
	store LeaseStore
	name  string
	limit int64
	lease time.Duration
}

// NewConcurrency returns a limit of at most limit leases per key, each
// expiring lease after it was acquired or last renewed. The name follows
// the rules of NewPolicy; limit is 1 to MaxConcurrency; lease is MinLease to
// MaxLease. Errors wrap ErrInvalidConcurrency.
func NewConcurrency(store LeaseStore, name string, limit int64, lease time.Duration) (*Concurrency, error) {
	if store == nil {
		return nil, errors.New("sluice: nil lease store")
	}
	if name == "" || len(name) > 200 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("%w: name %q must be 1 to 200 bytes without control characters", ErrInvalidConcurrency, name)
	}
	if limit < 1 || limit > MaxConcurrency {
		return nil, fmt.Errorf("%w: %q limit %d, want 1 to %d", ErrInvalidConcurrency, name, limit, MaxConcurrency)
	}
	if lease < MinLease || lease > MaxLease {
		return nil, fmt.Errorf("%w: %q lease %v, want %v to %v", ErrInvalidConcurrency, name, lease, MinLease, MaxLease)
	}
	return &Concurrency{store: store, name: name, limit: limit, lease: lease}, nil
}

// Name returns the limit's name.
func (c *Concurrency) Name() string { return c.name }

// Limit returns the most leases held at once per key.
func (c *Concurrency) Limit() int64 { return c.limit }

// Store returns the store that holds the leases.
func (c *Concurrency) Store() LeaseStore { return c.store }

// LeaseTimeout returns how long a lease lives unless renewed.
func (c *Concurrency) LeaseTimeout() time.Duration { return c.lease }

// Acquire takes a slot for key if fewer than the limit are held. When the
// Decision is Allowed, the returned Lease holds the slot until Release or
// until it expires; otherwise the Lease is nil and RetryAfter says when the
// earliest lease held expires by itself (a release may free a slot sooner).
// The Decision's Limit is the limit, Remaining the free slots after the
// call, and ResetAfter the time until the last lease held expires. An error
// means no decision could be made (the store failed); nothing is held then.
func (c *Concurrency) Acquire(ctx context.Context, key string) (*Lease, Decision, error) {
	id, err := newLeaseID()
	if err != nil {
		return nil, Decision{}, err
	}
	st, err := c.store.Acquire(ctx, c.name, key, id, c.limit, c.lease)
	if err != nil {
		return nil, Decision{}, err
	}
	d := c.decision(st)
	if !st.Granted {
		return nil, d, nil
	}
	return c.newLease(key, id, st), d, nil
}

// newLease returns the lease id granted for key with status st.
func (c *Concurrency) newLease(key, id string, st LeaseStatus) *Lease {
	store := st.Holder
	if store == nil {
		store = c.store
	}
	return &Lease{c: c, store: store, key: key, id: id, expires: st.Time.Add(c.lease)}
}

// Wait acquires a slot for key, waiting for one to free up while the
// context allows and no longer than maxWait. It polls the store: after a
// refusal it waits until the earliest lease would expire, but at most
// poll (default 50ms when poll <= 0), since a release frees a slot sooner.
// maxWait and poll run on the real clock (the timers of package time),
// whatever clock the store reads. It returns the last Decision; the Lease is
// nil unless it is Allowed, and an error if the store failed or ctx ended.
func (c *Concurrency) Wait(ctx context.Context, key string, maxWait, poll time.Duration) (*Lease, Decision, error) {
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	deadline := time.Now().Add(maxWait)
	for {
		l, d, err := c.Acquire(ctx, key)
		if err != nil || d.Allowed {
			return l, d, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, d, nil
		}
		t := time.NewTimer(min(d.RetryAfter, poll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, d, ctx.Err()
		case <-t.C:
		}
	}
}

func (c *Concurrency) decision(st LeaseStatus) Decision {
	return Decision{
		Allowed:    st.Granted,
		Limit:      c.limit,
		Remaining:  max(c.limit-st.InUse, 0),
		RetryAfter: st.RetryAfter,
		ResetAfter: st.ResetAfter,
		Time:       st.Time,
		Degraded:   st.Degraded,
	}
}

// newLeaseID returns 16 random bytes in hex: unique across processes
// without coordination.
func newLeaseID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sluice: lease id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Lease is a slot held by Acquire. Release it when the work ends. Its
// methods are safe for concurrent use.
type Lease struct {
	c     *Concurrency
	store LeaseStore // where the lease is held: see LeaseStatus.Holder
	key   string
	id    string

	mu       sync.Mutex
	expires  time.Time // on the store's clock
	released bool
}

// ID returns the lease's identifier, unique across processes.
func (l *Lease) ID() string { return l.id }

// Key returns the key the lease was acquired for.
func (l *Lease) Key() string { return l.key }

// Expires returns when the lease expires by itself on the store's clock,
// unless renewed.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Name returns the name of the Concurrency the lease belongs to.
func (l *Lease) Name() string { return l.c.name }

// Release gives the slot back. It returns an error wrapping ErrLeaseLost
// when the lease was no longer held (it had expired, or been reset), so
// that the work ran part of the time without a slot: another holder may
// have had it. Releasing a lease again, or a nil Lease, does nothing and
// returns nil. If the store fails, Release returns the error and may be
// called again; the lease expires by itself in any case.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	st, err := l.store.Release(ctx, l.c.name, l.key, l.id)
	if err != nil {
		return err
	}
	l.released = true
	if !st.Granted {
		return fmt.Errorf("%w: %s", ErrLeaseLost, l.id)
	}
	return nil
}

// ErrLeaseLost reports a Renew or Release of a lease that had expired or
// been reset (or, for Renew, released): its slot may have gone to another
// holder.
var ErrLeaseLost = errors.New("sluice: lease expired or released")

// Renew pushes the lease's expiry to the lease timeout from now, for work
// that runs longer than planned. It returns an error wrapping ErrLeaseLost
// if the lease has expired or been released: the work then runs without a
// slot, and the caller should stop it or acquire again.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: %s", ErrLeaseLost, l.id)
	}
	st, err := l.store.Renew(ctx, l.c.name, l.key, l.id, l.c.lease)
	if err != nil {
		return err
	}
	if !st.Granted {
		l.released = true
		return fmt.Errorf("%w: %s", ErrLeaseLost, l.id)
	}
	l.expires = st.Time.Add(l.c.lease)
	return nil
}

// LeaseInspector is a LeaseStore that can report and drop the leases of a
// key, for Concurrency.Peek and Concurrency.Reset (an operator's view).
// memstore.Store and redisstore.Store implement it.
type LeaseInspector interface {
	// Leases forgets the expired leases of key under name and reports
	// those held: InUse, ResetAfter and, when limit or more are held,
	// RetryAfter, the time until the earliest expires. Granted is false.
	Leases(ctx context.Context, name, key string, limit int64) (LeaseStatus, error)
	// ResetLeases drops every lease of key under name: their slots are
	// free at once, and their holders' Release and Renew find them gone.
	ResetLeases(ctx context.Context, name, key string) error
}

// ErrNoInspect reports a LeaseStore that is not a LeaseInspector.
var ErrNoInspect = errors.New("sluice: the lease store cannot inspect or reset leases")

// Peek reports the leases of key without taking one: Allowed tells whether
// a slot is free, Remaining how many, RetryAfter (when none is) the time
// until the earliest lease expires by itself, ResetAfter the time until
// the last one does. The store must be a LeaseInspector (ErrNoInspect
// otherwise).
func (c *Concurrency) Peek(ctx context.Context, key string) (Decision, error) {
	li, ok := c.store.(LeaseInspector)
	if !ok {
		return Decision{}, ErrNoInspect
	}
	st, err := li.Leases(ctx, c.name, key, c.limit)
	if err != nil {
		return Decision{}, err
	}
	d := c.decision(st)
	d.Allowed = st.InUse < c.limit
	return d, nil
}

// Reset drops every lease of key, freeing its slots at once (for an
// operator clearing slots held by work known to be gone). The store must be
// a LeaseInspector (ErrNoInspect otherwise).
func (c *Concurrency) Reset(ctx context.Context, key string) error {
	li, ok := c.store.(LeaseInspector)
	if !ok {
		return ErrNoInspect
	}
	return li.ResetLeases(ctx, c.name, key)
}
