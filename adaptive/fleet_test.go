package adaptive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Two gateways on one store share a fleet limit of 10 with shares of 90%
// (default) and 50% (sheddable): across both, sheddable requests fill 5
// slots, default ones 9, and critical ones the last; a released slot is
// free again in either.
func testFleet(t *testing.T, store sluice.LeaseStore) {
	t.Helper()
	gateways := make([]*Limiter, 2)
	for i := range gateways {
		f, err := NewFleet(store, "api", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		gateways[i] = mustNew(t, fixed(100, Options{Shares: Shares{Default: 0.9, Sheddable: 0.5}, Fleet: f}))
	}
	var held []*Slot
	fill := func(c Class, want int) {
		t.Helper()
		n := 0
		for i := 0; ; i++ {
			s, a, err := gateways[i%2].Acquire(context.Background(), c)
			if err != nil || a.FleetErr != nil {
				t.Fatalf("%s: %v, %v", c, err, a.FleetErr)
			}
			if !a.Admitted {
				if a.Reason != FleetLimit || a.RetryAfter != time.Second {
					t.Errorf("%s refused: %+v, want reason fleet and retry after 1s", c, a)
				}
				break
			}
			held = append(held, s)
			n++
		}
		if n != want {
			t.Errorf("%d more %s requests admitted across the fleet, want %d", n, c, want)
		}
	}
	fill(Sheddable, 5)
	fill(Default, 4)
	fill(Critical, 1)
	// Only the fleet refused: the gateways hold 10 of their 200.
	if n := gateways[0].Stats().InFlight + gateways[1].Stats().InFlight; n != 10 {
		t.Errorf("the gateways hold %d slots, want 10", n)
	}
	held[0].Release(context.Background(), Ignored)
	fill(Critical, 1)
	for _, s := range held {
		s.Release(context.Background(), Ignored)
	}
	fill(Sheddable, 5)
}

func TestFleetMemory(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	testFleet(t, store)
}

func TestFleetRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(redisstore.Options{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	testFleet(t, store)
}

// With Redis gone, requests are decided on the local limit alone, and the
// Admission says why.
func TestFleetStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	for _, onError := range []redisstore.Failure{redisstore.Local, redisstore.Allow, redisstore.Deny} {
		t.Run(onError.String(), func(t *testing.T) {
			store, err := redisstore.New(redisstore.Options{URL: srv.URL(), Timeout: 100 * time.Millisecond, OnError: onError})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			f, err := NewFleet(store, "api", 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			l := mustNew(t, fixed(3, Options{Shares: Shares{Default: 1}, Fleet: f}))
			srv.Pause(t)
			defer srv.Resume(t)
			for i := range 3 {
				_, a, err := l.Acquire(context.Background(), Default)
				if err != nil || !a.Admitted || !errors.Is(a.FleetErr, ErrFleetDegraded) {
					t.Fatalf("request %d with Redis paused: %+v, %v; want admitted on the local limit, FleetErr ErrFleetDegraded", i+1, a, err)
				}
			}
			if _, a, _ := l.Acquire(context.Background(), Default); a.Admitted || a.Reason != NoSlot {
				t.Errorf("past the local limit: %+v, want shed (limit)", a)
			}
		})
	}
}

func TestNewFleetValidates(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	for _, tc := range []struct {
		name  string
		limit int64
		lease time.Duration
	}{{"", 10, time.Minute}, {"api", 0, time.Minute}, {"api", 10, 0}} {
		if _, err := NewFleet(store, tc.name, tc.limit, tc.lease); !errors.Is(err, sluice.ErrInvalidConcurrency) {
			t.Errorf("NewFleet(%q, %d, %v): %v, want ErrInvalidConcurrency", tc.name, tc.limit, tc.lease, err)
		}
	}
}
