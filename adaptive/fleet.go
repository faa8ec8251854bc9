package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// ErrFleetDegraded is the Admission.FleetErr of a request whose fleet slot
// was decided by the store's failure path (redisstore's OnError): the
// request was decided on the local limit alone.
var ErrFleetDegraded = errors.New("adaptive: the fleet's store answered from its failure path")

// Fleet is a limit on the requests in flight to one upstream across every
// process that shares a sluice.LeaseStore (redisstore to share it between
// gateways), shared by the classes as a Limiter shares its own limit: a
// Default request needs fewer than Shares.Default × the fleet limit in
// flight across the fleet, and so on. It is a static ceiling over the
// adaptive limits, which stay local: with Shares.Default at 0.9 and a
// fleet limit of 400, 40 requests in flight across the fleet are always
// left to critical traffic.
//
// Each admitted request takes one lease of the store (one round trip to
// Redis) and gives it back when it ends (another); a lease whose process
// dies expires by itself after the lease timeout. A store that fails, or
// answers from its failure path, lets requests through on the local limit
// alone. A Fleet is safe for concurrent use.
type Fleet struct {
	limit int64
	store sluice.LeaseStore
	name  string
	lease time.Duration
	// ceilings holds a Concurrency per ceiling asked under (int64 →
	// *sluice.Concurrency), all of the same name and so counting the same
	// leases.
	ceilings sync.Map
}

// NewFleet returns a fleet limit of limit requests in flight, its leases
// kept in store under name (one key), each expiring lease after it was
// taken unless released: choose lease longer than the slowest response.
// limit is 1 to MaxLimit; name and lease follow sluice.NewConcurrency.
func NewFleet(store sluice.LeaseStore, name string, limit int64, lease time.Duration) (*Fleet, error) {
	c, err := sluice.NewConcurrency(store, name, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("adaptive: fleet: %w", err)
	}
	f := &Fleet{limit: limit, store: store, name: name, lease: lease}
	f.ceilings.Store(limit, c)
	return f, nil
}

// Limit returns the fleet limit.
func (f *Fleet) Limit() int64 { return f.limit }

// acquire takes a lease for a request of class c under c's share of the
// fleet limit.
func (f *Fleet) acquire(ctx context.Context, c Class, s *Shares) (*sluice.Lease, sluice.Decision, error) {
	ceiling := max(int64(math.Floor(float64(f.limit)*s.of(c))), 1)
	v, ok := f.ceilings.Load(ceiling)
	if !ok {
		// Leases of one name and key are counted together whatever the
		// limit asked with: each class asks under its own ceiling.
		conc, err := sluice.NewConcurrency(f.store, f.name, ceiling, f.lease)
		if err != nil {
			return nil, sluice.Decision{}, err
		}
		v, _ = f.ceilings.LoadOrStore(ceiling, conc)
	}
	return v.(*sluice.Concurrency).Acquire(ctx, "")
}
