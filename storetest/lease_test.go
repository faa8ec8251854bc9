package storetest_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storetest"
)

func TestMemstoreLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, clk *clock.Fake, n int) []sluice.LeaseStore {
		s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		out := make([]sluice.LeaseStore, n)
		for i := range out {
			out[i] = s
		}
		return out
	})
}

func TestMemstoreAcquireTake(t *testing.T) {
	storetest.RunAcquireTake(t, func(t *testing.T, clk *clock.Fake, n int) []storetest.RateLeaseStore {
		s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		out := make([]storetest.RateLeaseStore, n)
		for i := range out {
			out[i] = s
		}
		return out
	})
}

// A store without sluice.LeaseTaker gets AcquireTake's fallback, which
// passes the same suite for bucket limits.
func TestFallbackAcquireTake(t *testing.T) {
	storetest.RunAcquireTake(t, func(t *testing.T, clk *clock.Fake, n int) []storetest.RateLeaseStore {
		s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		out := make([]storetest.RateLeaseStore, n)
		for i := range out {
			out[i] = apart{s, s}
		}
		return out
	})
}

// apart hides a store's sluice.LeaseTaker.
type apart struct {
	sluice.Store
	sluice.LeaseStore
}
