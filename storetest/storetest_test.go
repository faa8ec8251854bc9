package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storetest"
)

func newMemstore(opts memstore.Options) func(*testing.T, *clock.Fake) sluice.Store {
	return func(t *testing.T, clk *clock.Fake) sluice.Store {
		opts.Clock = clk
		s := memstore.New(opts)
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestMemstore(t *testing.T) {
	storetest.Run(t, newMemstore(memstore.Options{SweepInterval: -1}))
}

// The janitor sweeps every millisecond of real time while the suite runs,
// reading the suite's fake clock: it must only ever remove state that is
// back to fresh.
func TestMemstoreWithJanitor(t *testing.T) {
	storetest.Run(t, newMemstore(memstore.Options{SweepInterval: time.Millisecond}))
}

// The suite in microsecond mode, as a Redis store runs it. memstore is
// exact, so it passes this mode too; this proves the mode itself.
func TestMemstoreMicrosecond(t *testing.T) {
	storetest.RunWith(t, storetest.Options{Resolution: time.Microsecond}, newMemstore(memstore.Options{SweepInterval: -1}))
}

// microStore rounds every duration memstore reports up to a whole
// microsecond, as a store that computes in microseconds does. It must pass
// the suite's microsecond mode: the mode tolerates rounding up. It hides
// memstore's TakeAll, so its run also checks sluice.TakeAll's own path for
// stores without one (check every request, then charge).
type microStore struct{ sluice.Store }

func roundUp(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

func micro(d sluice.Decision, err error) (sluice.Decision, error) {
	d.RetryAfter, d.ResetAfter, d.Delay = roundUp(d.RetryAfter), roundUp(d.ResetAfter), roundUp(d.Delay)
	return d, err
}

func (s microStore) Take(ctx context.Context, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	return micro(s.Store.Take(ctx, p, key, n))
}

func (s microStore) Peek(ctx context.Context, p *sluice.Policy, key string) (sluice.Decision, error) {
	return micro(s.Store.Peek(ctx, p, key))
}

func (s microStore) Reserve(ctx context.Context, p *sluice.Policy, key string, n int64, maxWait time.Duration) (sluice.Decision, error) {
	return micro(s.Store.Reserve(ctx, p, key, n, maxWait))
}

func TestMicrosecondRounding(t *testing.T) {
	mem := newMemstore(memstore.Options{SweepInterval: -1})
	storetest.RunWith(t, storetest.Options{Resolution: time.Microsecond}, func(t *testing.T, clk *clock.Fake) sluice.Store {
		return microStore{mem(t, clk)}
	})
}
