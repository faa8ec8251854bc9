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
