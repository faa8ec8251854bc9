package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// On a cluster, a policy and a concurrency limit of different names live in
// different slots: the store says so, having done nothing, and AcquireTake
// decides them one after the other instead of failing with CROSSSLOT.
func TestAcquireTakeClusterNamesApart(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	ctx := context.Background()
	s := open(t, redisstore.Options{Addrs: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}, Timeout: 5 * time.Second})
	p := policy(t, "rate-apart", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 2, Period: time.Minute, Burst: 2})
	if _, _, err := s.AcquireTake(ctx, p, 1, "slots-apart", "k", "id", 1, time.Minute); !errors.Is(err, sluice.ErrNotAtomic) {
		t.Fatalf("AcquireTake with names apart: got %v, want ErrNotAtomic", err)
	}
	lim, err := sluice.NewWithPolicy(s, p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sluice.NewConcurrency(s, "slots-apart", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l, a, err := c.AcquireTake(ctx, lim, "k", 1)
	if err != nil || !a.Allowed() {
		t.Fatalf("first: got %+v, %v, want allowed", a, err)
	}
	defer l.Release(ctx)
	// The slot is refused; the rate charge is given back.
	if _, a, err := c.AcquireTake(ctx, lim, "k", 1); err != nil || a.Allowed() || a.Slot.Allowed || a.Rate.Remaining != 1 {
		t.Fatalf("no slot: got %+v, %v, want the slot refused and rate remaining 1", a, err)
	}
}

// A policy with a penalty is decided with a lease in one call too: a
// blocked key takes no slot.
func TestAcquireTakePenalty(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second})
	p := policy(t, "pen-take", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Hour})
	p, err := p.WithPenalty(sluice.Penalty{Blocks: []time.Duration{time.Hour}, Forget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := sluice.NewWithPolicy(s, p)
	c, _ := sluice.NewConcurrency(s, "pen-take", 5, time.Minute)
	for i, want := range []bool{true, false, false} {
		_, a, err := c.AcquireTake(ctx, lim, "k", 1)
		if err != nil || a.Allowed() != want || a.Slot.Allowed != want {
			t.Fatalf("take %d: got %+v, %v, want allowed %v", i, a, err, want)
		}
		if i == 2 && a.Rate.RetryAfter < 59*time.Minute {
			t.Errorf("blocked: got retry %v, want about an hour", a.Rate.RetryAfter)
		}
	}
	if _, d, _ := c.Acquire(ctx, "k"); d.Remaining != 3 {
		t.Errorf("slots: got %d free after one admitted request, want 3", d.Remaining)
	}
}
