package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// refundStores returns the stores Refund is checked on, each on the same
// fake clock.
func refundStores(t *testing.T) map[string]func(*testing.T) (sluice.Store, *clock.Fake) {
	return map[string]func(*testing.T) (sluice.Store, *clock.Fake){
		"memstore": func(t *testing.T) (sluice.Store, *clock.Fake) {
			s, clk := newStore(t)
			return s, clk
		},
		"redisstore": func(t *testing.T) (sluice.Store, *clock.Fake) {
			srv := redistest.Start(t)
			clk := clock.NewFake(epoch)
			s, err := redisstore.New(redisstore.Options{URL: srv.URL(), Clock: clk, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("redisstore.New: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s, clk
		},
	}
}

func TestRefundGivesBackAnAdmittedRequest(t *testing.T) {
	ctx := context.Background()
	for name, open := range refundStores(t) {
		for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				store, clk := open(t)
				lim, err := sluice.New(store, "login-"+alg.String(), sluice.Limit{Algorithm: alg, Count: 5, Period: 15 * time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				// Reserve, then settle: nine requests, every other one
				// refunded, leave five charged; the sixth charge is refused.
				charged := 0
				for i := range 9 {
					d, err := lim.Allow(ctx, "alice")
					if err != nil || !d.Allowed {
						t.Fatalf("request %d: got %+v, %v; want allowed", i, d, err)
					}
					if i%2 == 1 {
						if err := lim.Refund(ctx, "alice", 1); err != nil {
							t.Fatalf("Refund: %v", err)
						}
						continue
					}
					charged++
				}
				if charged != 5 {
					t.Fatalf("charged %d, want 5", charged)
				}
				d, err := lim.Allow(ctx, "alice")
				if err != nil || d.Allowed {
					t.Fatalf("sixth charge: got %+v, %v; want denied", d, err)
				}
				// A refund after the bucket has drained gives no more than a
				// full quota.
				clk.Advance(time.Hour)
				if err := lim.Refund(ctx, "alice", 3); err != nil {
					t.Fatalf("Refund: %v", err)
				}
				d, err = lim.Peek(ctx, "alice")
				if err != nil || d.Remaining != 5 {
					t.Fatalf("after draining and refunding: got remaining %d, %v; want 5", d.Remaining, err)
				}
				// A refund long after the charge, before the bucket drained,
				// is exact: the one unit left is given back.
				for range 5 {
					lim.Allow(ctx, "alice")
				}
				clk.Advance(12 * time.Minute) // 4 of the 5 units have drained
				if err := lim.Refund(ctx, "alice", 1); err != nil {
					t.Fatalf("Refund: %v", err)
				}
				d, err = lim.Peek(ctx, "alice")
				if err != nil || d.Remaining != 5 {
					t.Fatalf("after refunding the last unit: got remaining %d, %v; want 5", d.Remaining, err)
				}
			})
		}
	}
}

func TestRefundNeedsBuckets(t *testing.T) {
	store, _ := newStore(t)
	lim, err := sluice.New(store, "w", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Refund(context.Background(), "k", 1); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Fatalf("got %v, want ErrReserveUnsupported", err)
	}
	gl, err := sluice.New(store, "g", sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := gl.Refund(context.Background(), "k", 0); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("got %v, want ErrInvalidCost", err)
	}
}
